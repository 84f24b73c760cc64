"""Local-only training, the lower bound of FedBR's comparison set: declaration (torch-free).
The implementation is in `fedhet.methods.local.algorithm`."""

from __future__ import annotations

from fedhet.declare import Method

DECLARATIONS = [
    Method(
        name="local",
        kind="algorithm",
        summary="Local-only: each client trains only its own model from the common initial "
                "model, never averaged; the logged global model is a mere sample-weighted "
                "average, the meaningful metric is the client models' accuracy "
                "(set eval: {client_models: true})",
        module="fedhet.methods.local.algorithm",
    ),
]

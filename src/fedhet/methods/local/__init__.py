"""Local-only training, the lower bound of FedBR's comparison set: declaration (torch-free).
The implementation is in `fedhet.methods.local.algorithm`."""

from __future__ import annotations

from fedhet.declare import Method

DECLARATIONS = [
    Method(
        name="local",
        kind="algorithm",
        summary="Local-only: each client trains only its own model from the common initial "
                "model, never averaged; test accuracy is the mean over the round's client "
                "models of each one's own accuracy (the saved model is their average)",
        module="fedhet.methods.local.algorithm",
        cuda_graph=True,
    ),
]

"""FedNTD — not-true distillation (Lee et al., NeurIPS 2022), one of FedBR's comparison set:
declaration (torch-free). The plug-in is in `fedhet.methods.fedntd.plugin`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="fedntd",
        kind="plugin",
        summary="FedNTD (Lee et al., 2022): not-true distillation from the received global model",
        module="fedhet.methods.fedntd.plugin",
        cuda_graph=True,
        vectorised_clients=True,  # stacked_loss: per-sample KL against the global model
        params={
            "beta": Param(
                1.0, "β, weight of the not-true distillation term (paper: 1; FedBR's grid 1, "
                "0.1); 0 = off (the run is its base algorithm's)",
                at_least=0,
            ),
            "tau": Param(1.0, "τ, distillation temperature (paper: 1; FedBR's code: 1)",
                         above=0),
        },
    )
]

"""FedMix — approximated Mixup under mean-augmented federated learning (Yoon et al., ICLR
2021), one of FedBR's comparison set: declaration (torch-free). The plug-in is in
`fedhet.methods.fedmix.plugin`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="fedmix",
        kind="plugin",
        summary="FedMix (Yoon et al., 2021): local loss of Mixup with other clients' mean images, "
        "approximated to first order",
        module="fedhet.methods.fedmix.plugin",
        cuda_graph="draws the step's mean images from a per-client generator inside the step",
        params={
            "lam": Param(
                0.1, "λ, the Mixup weight of the mean images (code: FedBR's fedmix_lambda 0.1; "
                "FedBR's grid 0.01, 0.1, 0.2); 0 = off (the run is its base algorithm's)",
                at_least=0, below=1,
            ),
            "mean_size": Param(
                10, "M, images of one client averaged into one mean image (code: FedBR's M = "
                "10)", kind="int", at_least=1,
            ),
        },
    )
]

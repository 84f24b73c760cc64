"""FedDecorr — feature decorrelation against dimensional collapse (Shi et al., ICLR 2023), one
of FedBR's comparison set: declaration (torch-free). The plug-in is in
`fedhet.methods.feddecorr.plugin`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="feddecorr",
        kind="plugin",
        summary="FedDecorr (Shi et al., 2023): a penalty on the correlations of the batch's "
        "penultimate features",
        module="fedhet.methods.feddecorr.plugin",
        cuda_graph=True,
        concurrent_clients=True,  # a loss on the batch's features; no state
        vectorised_clients=True,  # the same loss as stacked_loss
        params={
            "beta": Param(
                0.1, "β, weight of L_dc (code: FedDecorr's CIFAR scripts and FedBR's code use "
                "0.1); 0 = off (the run is its base algorithm's)",
                at_least=0,
            ),
            "formula": Param(
                "official",
                "official = FedDecorr's code: ẑ = (z − mean)/√(var + 1e-8) (unbiased var), "
                "L_dc = mean over a ≠ b of ((ẑᵀẑ)_ab)² / N; fedbr_code = FedBR's code: ẑ = "
                "(z − mean)/(std + 1e-4), L_dc = mean over all a, b of ((ẑᵀẑ/N)_ab)²",
                choices=("official", "fedbr_code"),
            ),
        },
    )
]

"""Mixup (Zhang et al., ICLR 2018) on local batches, as FedBR (Guo et al., ICML 2023) uses it
after Yan et al. (2020): declaration (torch-free). The plug-in is in
`fedhet.methods.mixup.plugin`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="mixup",
        kind="plugin",
        summary="Mixup (Zhang et al., 2018) on local batches: convex combinations of a batch and "
        "its permutation, with mixed soft targets",
        module="fedhet.methods.mixup.plugin",
        cuda_graph=(
            "λ is drawn on the host each step (numpy's Beta) and enters the step as a "
            "Python float"
        ),
        params={
            "alpha": Param(
                0.2, "α of λ ~ Beta(α, α), one λ per batch (code: FedBR's mixup_alpha 0.2)",
                above=0,
            ),
        },
    )
]

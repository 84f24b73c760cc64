"""FedCM (Xu et al., 2021), a base algorithm of FedBR's comparison set: declaration
(torch-free). The implementation is in `fedhet.methods.fedcm.algorithm`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="fedcm",
        kind="algorithm",
        summary="FedCM (Xu et al., 2021): client momentum g ← α·g + (1−α)·Δ towards the last "
                "global update direction Δ, broadcast with the model (2× download)",
        module="fedhet.methods.fedcm.algorithm",
        cuda_graph="correct_gradient branches on the round (round 1 has no Δ yet)",
        concurrent_clients=True,
        params={
            "alpha": Param(
                0.1,
                "α, weight of the local gradient in g ← α·g + (1−α)·Δ; code: "
                "d_p·(1−0.9) + 0.9·Δ, i.e. α = 0.1 (FedBR's code); 1 = FedAvg",
                above=0, at_most=1,
            ),
        },
    ),
]

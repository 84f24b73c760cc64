"""GroupDRO (Sagawa et al., 2019) as FedBR uses it, one group per client: declaration
(torch-free). The implementation is in `fedhet.methods.groupdro.algorithm`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="groupdro",
        kind="algorithm",
        summary="GroupDRO (Sagawa et al., 2019) over clients: server weights q_k ← q_k·exp(η·ℓ_k) "
                "per client id, new model Σ_{k∈S} q_k w_k / Σ_{k∈S} q_k (not sample-weighted)",
        module="fedhet.methods.groupdro.algorithm",
        cuda_graph="extra_loss keeps the first step's loss by a Python branch on the step count",
        params={
            "eta": Param(0.01, "η, step of the exponentiated weight update (code: groupdro_eta "
                               "0.01); 0 = uniform average over the round's clients", at_least=0),
            "loss": Param(
                "first_step",
                "ℓ_k, client k's loss of the round: first_step = the loss of its first local "
                "step, i.e. of the received model (code); mean = the mean over its local steps "
                "(a reading of the paper's 'loss value of client k at round t')",
                choices=("first_step", "mean"),
            ),
        },
    ),
]

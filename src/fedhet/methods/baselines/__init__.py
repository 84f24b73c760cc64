"""The base federated algorithms: declarations (torch-free). Implementations (flat-vector
update rules) are in `fedhet.methods.baselines.algorithms`."""

from __future__ import annotations

from fedhet.declare import Method, Param

_MODULE = "fedhet.methods.baselines.algorithms"

DECLARATIONS = [
    Method(
        name="fedavg",
        kind="algorithm",
        summary="FedAvg (McMahan et al., 2017): local SGD, sample-weighted model average",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
    ),
    Method(
        name="fedprox",
        kind="algorithm",
        summary="FedProx (Li et al., 2020): proximal term (μ/2)‖w − w_g‖² in the local objective",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
        params={"mu": Param(0.01, "μ, weight of the proximal term", at_least=0)},
    ),
    Method(
        name="scaffold",
        kind="algorithm",
        summary="SCAFFOLD (Karimireddy et al., 2020): option-II control variates",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
        version=2,  # 2: correction applied after the step, outside client momentum
        params={
            "global_lr": Param(1.0, "η_g, the server's step on the averaged update", above=0),
            "paper_server_update": Param(
                True, "c ← c + (|S|/N)·mean Δc_i (paper); false: no |S|/N factor (code)"
            ),
            "model_average": Param(
                "samples",
                "samples: x ← x + η_g Σ (n_i/Σn)(y_i − x) (VHL/FedImpro code); "
                "mean: (1/|S|) Σ (y_i − x), the paper's Alg. 1",
                since=1,
                choices=("samples", "mean"),
            ),
        },
    ),
    Method(
        name="fednova",
        kind="algorithm",
        summary="FedNova (Wang et al., 2020): normalised averaging, momentum-aware",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
    ),
    Method(
        name="fedavgm",
        kind="algorithm",
        summary="FedAvgM (Hsu et al., 2019): server momentum on the averaged update",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
        params={
            "server_momentum": Param(0.9, "β, server momentum", at_least=0, below=1),
            "server_lr": Param(1.0, "η_s, server learning rate", above=0),
        },
    ),
    Method(
        name="feddyn",
        kind="algorithm",
        summary="FedDyn (Acar et al., 2021): dynamic regularisation",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
        params={"alpha": Param(0.1, "α, weight of the dynamic regulariser", above=0)},
    ),
    Method(
        name="moon",
        kind="algorithm",
        summary="MOON (Li et al., 2021): model-contrastive loss on projected features",
        module=_MODULE,
        cuda_graph=True,
        concurrent_clients=True,
        vectorised_clients=True,
        params={
            "mu": Param(5.0, "μ, weight of the model-contrastive loss", at_least=0),
            "temperature": Param(0.5, "τ of the model-contrastive loss", above=0),
        },
    ),
]

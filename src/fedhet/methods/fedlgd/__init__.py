"""FedLGD (Huang et al.): declarations (torch-free).

`distilled` trains every client on its cached local virtual data instead of its raw images
(FedLGD §4.1: the baselines train on the local virtual data of FedLGD's initialisation); the
data is an artefact of the family `distilled` (`fedhet.distill`). `fedlgd` is FedLGD itself on
top of the same artefact: iterative distribution matching of the local data with the global
model, federated gradient matching of the global virtual data on the server, and the local
objective CE + λ·SupCon against the global virtual features.
Meanings say where a value comes from: "code" = the authors' public code, "paper" = its text,
"assumed" = neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.declare import Artefact, ArtefactFamily, Method, Param

DISTILLED_DATA = ArtefactFamily(
    name="distilled",
    command="fedhet distill --settings {settings} --root resources/datasets"
    " --partitions resources/partitions",
    summary="FedLGD's initial local virtual data of every client (statistics initialisation "
    "and distribution matching), one per dataset, partition and distillation setting",
    build="fedhet.distill.core:build_distilled",
)


def _artefacts(run: Mapping[str, Any], params: Mapping[str, Any]) -> list[Artefact]:
    from fedhet.distill.spec import distilled_key, settings_for_run

    settings = settings_for_run(run, params)
    return [Artefact("distilled", distilled_key(settings), settings, (settings["dataset"],))]


DISTILLED_PARAMS = {
    "ipc": Param(10, "paper: local virtual images per class (Tables 1-2: 10 or 50)", at_least=1),
    "server_ipc": Param(10, "paper: global virtual images per class (fixed at 10, §4.2)",
                        at_least=1),
    "init": Param("normal", "paper: normal = per-class statistics (Eq. in §4.1), noise = "
                  "N(0, 1), real = the client's own images (Table 9)",
                  choices=("normal", "noise", "real")),
    "init_stats": Param("fixed", "fixed: moments over the class's pixels; code: over the "
                        "client's (the code's bug, μ shrinks by n_c/N)",
                        choices=("fixed", "code")),
    "warmup_steps": Param(10000, "code: DM iterations of the initialisation, each with a "
                          "fresh random ConvNet", kind="int", at_least=0),
    "real_batch": Param(256, "code: real images per class in a DM iteration", at_least=1),
    "lr_img": Param(1.0, "code: SGD learning rate of the virtual images", above=0),
    "img_momentum": Param(0.5, "code: SGD momentum of the virtual images", at_least=0),
    "dsa": Param({"brightness": 1.0, "saturation": 2.0, "contrast": 0.5, "crop": 0.125,
                  "cutout": 0.5, "flip": 0.5, "scale": 1.2, "rotate": 15.0},
                 "code (DM's ParamDiffAug): Siamese augmentation ratios"),
    "embed_width": Param(1.0, "code: width of DM's random ConvNet (1 = 128 channels)", above=0),
    "embed_depth": Param(3, "code: conv blocks of DM's random ConvNet", at_least=1),
    "distill_seed": Param(None, "seed of the distillation; None = the run seed", kind="int",
                          at_least=0),
}

DECLARATIONS = [
    Method(
        name="distilled",
        kind="plugin",
        summary="clients train on their cached local virtual data (FedLGD's initialisation: "
        "class statistics and distribution matching), never on their raw images",
        module="fedhet.methods.fedlgd.plugin",
        cuda_graph="each client trains on tensors of its own (its distilled images)",
        version=1,
        params=DISTILLED_PARAMS,
        artefacts=_artefacts,
        artefact_families=(DISTILLED_DATA,),
    ),
    Method(
        name="fedlgd",
        kind="plugin",
        summary="FedLGD (Huang et al.): local-global distillation with federated gradient "
        "matching",
        module="fedhet.methods.fedlgd.plugin",
        cuda_graph=(
            "each client trains on tensors of its own (its distilled images), and the "
            "step branches on the round (the rounds of global distillation)"
        ),
        version=2,  # 2: SupCon's mean over anchors masked, not indexed (last bits may differ)
        params={
            **DISTILLED_PARAMS,
            "distill_every": Param(5, "code: g, rounds between global distillations", at_least=1),
            "distill_times": Param(10, "paper: |τ| = 10 distillation rounds after the first",
                                   at_least=0),
            "local_steps": Param(100, "paper: DM iterations of a client at a round of τ",
                                 at_least=0),
            "server_steps": Param(500, "paper: gradient-matching iterations of the server",
                                  at_least=0),
            "lambda": Param(1.0, "weight of the regulariser (code README: 10 on DIGITS, 1 on "
                            "CIFAR10C, 0.1 on RETINA)", at_least=0),
            "reg": Param("supcon", "supcon (paper) | mmd (Fig. 3a's alternative)",
                         choices=("supcon", "mmd")),
            "temperature": Param(0.07, "code: SupCon τ = base τ", above=0),
            "ce_on_global": Param(True, "code: the CE also trains on the global virtual data "
                                  "(paper: the local virtual data only)"),
            "reg_at_distill_rounds": Param(False, "code: the rounds of τ train with CE only"),
        },
        artefacts=_artefacts,
        artefact_families=(DISTILLED_DATA,),
    ),
]

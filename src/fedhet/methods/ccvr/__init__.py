"""CCVR — classifier calibration with virtual representations (Luo et al., NeurIPS 2021):
declarations (torch-free).

Two plug-ins that change training (`clsnorm`, `clsprox`, in `fedhet.methods.ccvr.plugins`) and
two post-hoc steps on a finished run (`ccvr`, `oracle`, in `fedhet.posthoc.ccvr`; their settings
are `fedhet.posthoc.settings`)."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="clsnorm",
        kind="plugin",
        summary="CCVR §3.3: classifier weight vectors L2-normalised in training and inference",
        module="fedhet.methods.ccvr.plugins",
        cuda_graph=True,
        params={
            "bias": Param(False, "add the head's bias to z·φ_i/‖φ_i‖ (the paper has none)"),
        },
    ),
    Method(
        name="clsprox",
        kind="plugin",
        summary="CCVR §3.3: (μ/2)‖φ_k − φ_g‖² on the classifier only",
        module="fedhet.methods.ccvr.plugins",
        cuda_graph=True,
        params={"mu": Param(0.01, "μ; not given in the paper (assumed)", at_least=0)},
    ),
    Method(
        name="ccvr",
        kind="posthoc",
        summary="CCVR: classifier retrained on virtual features sampled from merged Gaussians",
        module="fedhet.posthoc.ccvr",
        version=2,  # 2: accuracies scored with the run's plug-in logit map, as in training
    ),
    Method(
        name="oracle",
        kind="posthoc",
        summary="CCVR's oracle: classifier retrained on the real features of the training data",
        module="fedhet.posthoc.ccvr",
        version=2,  # 2: accuracies scored with the run's plug-in logit map, as in training
    ),
]

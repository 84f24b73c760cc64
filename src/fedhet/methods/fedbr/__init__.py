"""FedBR (Guo et al., ICML 2023): declaration (torch-free).

The plug-in is in `fedhet.methods.fedbr.plugin`, its pseudo-data in `fedhet.methods.fedbr.pseudo`
and its losses in `fedhet.methods.fedbr.losses`. Meanings say where a default comes from:
"paper" (the text), "code" (the authors' public code), "assumed" (neither). Where the two
disagree the other reading is one option away, and the FedBR report's item `x1` compares the
two on the settings that move the numbers (τ and λ).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.declare import DatasetParam, Method, Param


def _reads_datasets(run: Mapping[str, Any], params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The proxy dataset of Mixture pseudo-data (none for RSM)."""
    if params["pseudo"] != "mixture":
        return []
    return [{"name": params["proxy"], "options": params["proxy_options"] or {}}]


DECLARATIONS = [
    Method(
        name="fedbr",
        kind="plugin",
        summary="FedBR (Guo et al., ICML 2023): pseudo-data and min-max contrastive reduction of "
        "local learning bias",
        module="fedhet.methods.fedbr.plugin",
        cuda_graph=(
            "draws the Mixture pseudo-data from a per-client generator inside the step, "
            "and keeps z_g on the host from step to step"
        ),
        params={
            "lam": Param(
                0.1,
                "λ, weight of Component 1 (soft cross-entropy on the pseudo-data): paper 0.1 on "
                "CIFAR-10 and PACS, 1.0 on RotatedMNIST and CIFAR-100 (code: 1.0 everywhere)",
                at_least=0,
            ),
            "mu": Param(0.5, "μ, weight of Component 2's contrastive term (paper and code)",
                        at_least=0),
            "tau1": Param(
                2.0, "τ1 of the positive pair: paper exp(cos/τ), τ = 2.0 (code multiplies cos by "
                "2, i.e. τ = 0.5)", above=0,
            ),
            "tau2": Param(2.0, "τ2 of the negative pair (paper 2.0; code 0.5, see tau1)", above=0),
            "max_step": Param(
                True, "Component 2's max step: the clients train the projection θ adversarially "
                "(ascent on the contrastive loss); false = θ stays as initialised (Table 4)",
            ),
            "projection": Param(
                "mlp",
                "P_θ: mlp = the three-layer MLP (paper App. A); identity = no θ and no max step "
                "(Table 4's 'w/o max step' and '+ min step' rows)",
                choices=("mlp", "identity"),
            ),
            "proj_hidden": Param(256, "width of P_θ's hidden layers (paper 256; code 2d)",
                                 at_least=1),
            "proj_dim": Param(128, "output dimension of P_θ (paper 128; code d)", at_least=1),
            "pseudo": Param(
                "rsm",
                "pseudo-data: rsm = each sample the mean of `rsm_samples` local images, label "
                "1/C (paper's default, §4.2); mixture = Eq. 4: a proxy dataset's RSM mixed with "
                "K images of the local batch (code README's default)",
                choices=("rsm", "mixture"),
            ),
            "pseudo_size": Param(
                None, "|D_p| = B_p, the pseudo-data per step; null = training.batch_size (paper "
                "App. A: 64 on RotatedMNIST, 32 elsewhere)", kind="int", at_least=1,
            ),
            "rsm_samples": Param(10, "M, images averaged into one pseudo sample (code)",
                                 at_least=1),
            "rsm_source": Param(
                "client",
                "client = the M images of a sample come from one uniformly drawn client; "
                "balanced = from one uniformly drawn class over all clients (Fig. 6d)",
                choices=("client", "balanced"),
            ),
            "mixture_k": Param(1, "K of Eq. 4, local images mixed into each proxy sample "
                               "(paper: K = 1 suffices; K = 0 = the proxy RSM alone)",
                               at_least=0),
            "proxy": Param("cifar100", "proxy dataset of Mixture (code: CIFAR-100 for CIFAR-10, "
                           "CIFAR-10 for CIFAR-100); images conformed to the run's shape"),
            "proxy_options": Param({}, "the proxy dataset's options"),
            "refresh": Param(
                "round",
                "round = new pseudo-data every round (paper §5.1); once = one batch drawn at "
                "the start and kept (paper §5.3, code README)",
                choices=("round", "once"),
            ),
            "global_feature": Param(
                "per_step",
                "z_g = φ_g(x̃_p) per step (the paper: Mixture's x̃_p changes every step); "
                "first_step = computed at a client's first step and kept (code's cache)",
                choices=("per_step", "first_step"),
            ),
        },
        dataset_params=(DatasetParam("proxy", "proxy_options"),),
        reads_datasets=_reads_datasets,
    )
]

"""VHL — Virtual Homogeneity Learning (Tang et al., ICML 2022): declaration (torch-free).

The plug-in is in `fedhet.methods.vhl.plugin`; its virtual datasets (`fedhet.virtual`) are cached
artefacts of the family `virtual`. Meanings say where a value comes from: "code" = the authors'
public code, "assumed" = in neither the paper nor the code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.declare import Artefact, ArtefactFamily, DatasetParam, Method, Param

VIRTUAL_DATA = ArtefactFamily(
    name="virtual",
    command="fedhet virtual-data --settings {settings} --root resources/datasets",
    summary="VHL's virtual datasets: generated images (StyleGAN-style, noise, CNN) or a "
    "real-image subset, one per generator setting",
    build="fedhet.virtual.core:build_virtual",
)


def _artefacts(run: Mapping[str, Any], params: Mapping[str, Any]) -> list[Artefact]:
    from fedhet.virtual.spec import real_source, settings_for_dataset, virtual_key

    settings = settings_for_dataset(params, run["dataset"])
    if settings is None:
        return []
    source = real_source(settings)
    return [Artefact("virtual", virtual_key(settings), settings, (source,) if source else ())]


def _cost_factor(run: Mapping[str, Any], params: Mapping[str, Any]) -> float:
    """Virtual images are extra samples of every step: × (1 + virtual batch / natural batch)."""
    if params["variant"] == "vfa":
        return 1.0
    batch = run["training"]["batch_size"]
    virtual = params["virtual_batch_size"]
    return 1.0 + (batch if virtual is None else virtual) / batch


DECLARATIONS = [
    Method(
        name="vhl",
        kind="plugin",
        summary="Virtual Homogeneity Learning (Tang et al., ICML 2022): shared virtual data and "
        "feature calibration",
        module="fedhet.methods.vhl.plugin",
        cuda_graph=True,  # the virtual batch is drawn in prepare_step and held
        concurrent_clients=True,  # per-client draws live in ctx.extra["vhl"]
        version=2,  # 2: SupCon's mean over anchors masked, not indexed (last bits may differ)
        params={
            "variant": Param(
                "vhl", "vhl | naive (no calibration) | vfa (Gaussian features) | vftl",
                choices=("vhl", "naive", "vfa", "vftl"),
            ),
            "virtual_kind": Param(
                "stylegan", "stylegan | noise | cnn | tinyimagenet10 (fedhet.virtual)"
            ),
            "virtual_classes": Param(
                None, "C_v; None = the C natural classes (paper); 0 = off", kind="int", at_least=0
            ),
            "virtual_per_class": Param(
                200, "virtual images per class; code's active setting (a commented variant: 5000)",
                at_least=1,
            ),
            "virtual_seed": Param(
                0, "assumed: one virtual dataset for every run seed, as generated once", at_least=0
            ),
            "virtual_options": Param({}, "generator options and defaults: fedhet.virtual.spec"),
            "virtual_batch_size": Param(
                None, "None = training.batch_size (paper: 128 natural + 128 virtual)", kind="int",
                at_least=0,
            ),
            "virtual_augment": Param(
                True, "code: RandomCrop + HFlip on virtual images (any dataset)"
            ),
            "virtual_normalization": Param(
                "code", "code: mean 0.5, std 0.25; natural: the dataset's statistics",
                choices=("code", "natural"),
            ),
            "virtual_ce_weight": Param(1.0, "code: weight of the CE on virtual images", at_least=0),
            "calibration_weight": Param(
                1.0, "code; Table 6 default (assumed reading): weight of the SupCon calibration",
                at_least=0,
            ),
            "calibration_layer": Param(
                "penultimate",
                "code: avgpool feature before the classifier (a split point: name or 1-based "
                "position)"
            ),
            "temperature": Param(0.07, "code: SupCon tau = base tau = 0.07, mode 'all'", above=0),
            "virtual_supcon_weight": Param(
                0.1, "assumed (code): extra SupCon on virtual features alone", at_least=0
            ),
            "eval_protocol": Param(
                "all", "assumed (code): argmax over C + C_v; natural = argmax over C",
                choices=("all", "natural"),
            ),
            "vfa_mean_std": Param(
                1.0, "assumed: VFA class means ~ N(0, 1) at the calibration layer", at_least=0
            ),
            "vfa_std": Param(0.3, "assumed: VFA samples ~ N(mean, 0.3^2)", at_least=0),
            "vftl_steps": Param(
                1000, "assumed: SGD steps of server pre-training on virtual data (VFTL)", at_least=0
            ),
        },
        # a real-image virtual source (Tiny-ImageNet subset) is mapped by the scale like a run's
        # dataset; it is read by the artefact's build, not by the run
        dataset_params=(
            DatasetParam("virtual_options.dataset", "virtual_options.dataset_options"),
        ),
        artefacts=_artefacts,
        artefact_families=(VIRTUAL_DATA,),
        cost_factor=_cost_factor,
    )
]

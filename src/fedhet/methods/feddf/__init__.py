"""FedDF — ensemble distillation for model fusion (Lin et al., NeurIPS 2020): declaration
(torch-free). The plug-in is in `fedhet.methods.feddf.plugin`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.declare import DatasetParam, Method, Param


def _reads_datasets(run: Mapping[str, Any], params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The unlabeled images' dataset (none for `noise`)."""
    if params["unlabeled"] == "noise":
        return []
    return [{"name": params["unlabeled"], "options": params["unlabeled_options"] or {}}]


DECLARATIONS = [
    Method(
        name="feddf",
        kind="plugin",
        summary="FedDF (Lin et al., NeurIPS 2020): server-side ensemble distillation after "
        "aggregation",
        module="fedhet.methods.feddf.plugin",
        cuda_graph=True,  # it trains the server's model after aggregation; no step hook
        version=2,  # 2: early stopping on validation images, best student kept
        params={
            "unlabeled": Param(
                "cifar100", "dataset name, or 'noise'; FedDF's choice for CIFAR-10"
            ),
            "unlabeled_options": Param(
                {}, "dataset options (images are converted to the run's shape)"
            ),
            "unlabeled_size": Param(
                None, "None = every training image of the unlabeled dataset", kind="int", at_least=1
            ),
            "steps": Param(
                1000, "most steps a round; assumed: FedDF allows 10^4 (with early stopping)",
                at_least=0,
            ),
            "validation_size": Param(
                500,
                "assumed: labelled validation images for early stopping; 0 = no validation "
                "(all `steps`, last student kept)",
                at_least=0,
            ),
            "eval_every": Param(100, "assumed: validate every this many steps", at_least=1),
            "patience": Param(1000, "FedDF: stop after 10^3 steps without improvement", at_least=1),
            "batch_size": Param(
                None, "None = training.batch_size (FedDF: 64)", kind="int", at_least=1
            ),
            "lr": Param(1.0e-3, "FedDF: Adam, lr 1e-3", above=0),
            "temperature": Param(1.0, "FedDF code default KL temperature", above=0),
            "augment": Param(True, "assumed: the training augmentation on the unlabeled images"),
            "seed": Param(0, "which unlabeled subset when unlabeled_size is set", at_least=0),
        },
        dataset_params=(DatasetParam("unlabeled", "unlabeled_options"),),
        reads_datasets=_reads_datasets,
    )
]

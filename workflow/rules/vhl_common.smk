# Helpers of workflow/rules/vhl.smk (virtual datasets, their grids, client t-SNE).
import shlex

from fedhet.virtual import settings_for_run, virtual_key, virtual_path
from fedhet.virtual.spec import real_source


def _uses_vhl(run):
    return any(p["name"] == "vhl" for p in run.get("plugins") or [])


VIRTUAL = {}  # virtual key → resolved generator settings
RUN_VIRTUAL = {}  # run id → virtual key
# virtual key → prepared real datasets it reads (the Tiny-ImageNet subset)
VIRTUAL_SOURCES = {}
for _rid, _run in EXP.runs.items():
    _settings = settings_for_run(_run) if _uses_vhl(_run) else None
    if _settings is None:
        continue
    _key = virtual_key(_settings)
    VIRTUAL[_key] = _settings
    RUN_VIRTUAL[_rid] = _key
    _source = real_source(_settings)
    VIRTUAL_SOURCES[_key] = []
    if _source is not None:
        _dkey = X.dataset_key({"dataset": _source})
        EXP.datasets.setdefault(_dkey, _source)  # prepared like any run's dataset
        VIRTUAL_SOURCES[_key] = [f"resources/datasets/{_dkey}.path"]
    TRAIN_EXTRA_INPUTS.setdefault(_rid, {})["virtual"] = str(
        virtual_path(_settings, _run["dataset"]["root"])
    )

VHL_GRID_FIGURES = sorted(
    i.id for i in ITEMS.values() if i.paper == "vhl" and i.kind == "virtual_grid"
)
VHL_TSNE_FIGURES = sorted(
    i.id for i in ITEMS.values() if i.paper == "vhl" and i.kind == "tsne"
)


def vhl_virtual_inputs(wildcards):
    """The real dataset a `tinyimagenet10` virtual set is cut from; nothing for generators."""
    return VIRTUAL_SOURCES[wildcards.virtual_key]


def vhl_virtual_settings(wildcards):
    return json.dumps(
        VIRTUAL[wildcards.virtual_key], sort_keys=True, separators=(",", ":")
    )


def vhl_grid_inputs(wildcards):
    """The cached virtual dataset of the figure's (first) cell."""
    item = item_of(wildcards, "figure")
    keys = [RUN_VIRTUAL[r] for r in item.run_ids() if r in RUN_VIRTUAL]
    if not keys:
        raise WorkflowError(f"{item.target}: its cell uses no virtual images")
    return f"resources/datasets/virtual/{keys[0]}.pt"


def vhl_tsne_inputs(wildcards):
    """Final metrics and models of the figure's runs (their jobs saved the client models)."""
    item = item_of(wildcards, "figure")
    base = f"results/{SCALE}/runs"
    return [
        f"{base}/{rid}/{name}"
        for rid in item.run_ids()
        for name in ("final.json", "model.pt")
    ]


def vhl_tsne_runs(wildcards):
    """Run directories of the figure's cells (first seed), one panel each."""
    item = item_of(wildcards, "figure")
    base = f"results/{SCALE}/runs"
    return " ".join(f"{base}/{c.run_ids[0]}" for c in item.cells if c.run_ids)


def vhl_tsne_labels(wildcards):
    item = item_of(wildcards, "figure")
    return " ".join(
        shlex.quote(c.display.get("method", c.column)) for c in item.cells if c.run_ids
    )

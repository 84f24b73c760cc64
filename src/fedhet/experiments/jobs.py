"""The jobs a resolved run needs besides its training: its datasets, partition file, cached
artefacts and post-hoc calibrations, each keyed so that equal jobs are shared; and the run's
cost in passes over the data. Everything method-specific comes from the method declarations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet import catalog
from fedhet.config import ConfigError
from fedhet.declare import Artefact
from fedhet.experiments.loading import ExperimentError, short_hash

# Calibration settings that say how, not what: left out of the calibration key.
POSTHOC_EXECUTION_KEYS = ("device", "feature_batch_size")
PARTITION_FLAGS = ("scheme", "num_clients", "alpha", "classes_per_client", "min_size", "cap")


def _methods(run: Mapping[str, Any]):
    """(declaration, params) of the run's algorithm and plug-ins, in order."""
    algo = run["algorithm"]
    yield catalog.method(algo["name"]), algo["params"]
    for plugin in run.get("plugins") or []:
        yield catalog.method(plugin["name"]), plugin["params"]


def dataset_key(run: Mapping[str, Any]) -> str:
    """File-name key of a dataset variant (name + options)."""
    ds = run["dataset"]
    options = ds.get("options") or {}
    if not options:
        return ds["name"]
    return f"{ds['name']}-{short_hash(options)}"


def extra_datasets(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Registered datasets ({name, options}) the run's training job reads besides its own,
    as its methods declare (FedDF's unlabeled images)."""
    found = []
    for decl, params in _methods(run):
        if decl.reads_datasets is not None:
            found.extend(decl.reads_datasets(run, params))
    return found


def artefacts(run: Mapping[str, Any]) -> list[Artefact]:
    """Cached artefacts the run's training job reads, as its methods declare (VHL's virtual
    dataset)."""
    found = []
    for decl, params in _methods(run):
        if decl.artefacts is not None:
            found.extend(decl.artefacts(run, params))
    return found


def artefact_id(artefact: Artefact) -> str:
    return f"{artefact.family}/{artefact.key}"


def _declared_factor(run: Mapping[str, Any]) -> float:
    """The product of the run's methods' declared cost factors (VHL's virtual images)."""
    factor = 1.0
    for decl, params in _methods(run):
        if decl.cost_factor is not None:
            factor *= decl.cost_factor(run, params)
    return factor


def cost_factor(run: Mapping[str, Any]) -> float:
    """Passes over all clients' training data per round (VHL Table 10): the share of clients
    sampled × local epochs, × each method's declared factor (VHL's virtual images)."""
    t = run["training"]
    share = 1.0 if t["centralized"] else t["clients_per_round"] / run["partition"]["num_clients"]
    return share * t["local_epochs"] * _declared_factor(run)


def dataset_epochs(run: Mapping[str, Any]) -> float:
    """Training work in passes over the whole training set (for runtime estimates)."""
    t = run["training"]
    if t["centralized"]:
        return float(t["rounds"] * t["local_epochs"])
    share = t["clients_per_round"] / max(1, run["partition"]["num_clients"])
    return float(t["rounds"] * t["local_epochs"] * share)


def training_images(run: Mapping[str, Any], train_size: int) -> float:
    """Images a run's local training puts through its model (forward and backward), expected
    over the sampled clients, × its methods' declared factors (VHL's virtual batch): the
    measure of a run's training work that the demo's budget is kept in. `train_size` is the
    number of training images. Server-side work (distillation, calibration) is not counted."""
    t = run["training"]
    clients = 1 if t["centralized"] else t["clients_per_round"]
    if t.get("local_steps"):
        per_round = clients * t["local_steps"] * t["batch_size"]
    else:
        share = 1.0 if t["centralized"] else clients / run["partition"]["num_clients"]
        per_round = share * t["local_epochs"] * train_size
    return t["rounds"] * per_round * _declared_factor(run)


def partition_job(run: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The partition file a run trains on, as its own job: (key, settings for `fedhet
    partition`). None for centralized runs (no partition) and for scheme options the
    command line cannot pass (the run then builds its partition itself, cached)."""
    if run["training"]["centralized"]:
        return None
    part = run["partition"]
    if part.get("options"):
        return None
    settings = {k: part.get(k) for k in PARTITION_FLAGS}
    key_src = {"dataset": dataset_key(run), "partition": settings, "seed": run["seed"]}
    key = f"{dataset_key(run)}-{part['scheme']}-n{part['num_clients']}-{short_hash(key_src, 8)}"
    key = f"{key}-s{run['seed']}"
    job = {
        "dataset_key": dataset_key(run),
        "dataset": run["dataset"]["name"],
        "options": run["dataset"]["options"],
        "seed": run["seed"],
        **settings,
    }
    return key, job


def partition_args(job: Mapping[str, Any]) -> str:
    """Command-line flags of `fedhet partition` for a partition job (see `partition_job`)."""
    args = [
        f"--scheme {job['scheme']}",
        f"--clients {job['num_clients']}",
        f"--alpha {job['alpha']}",
        f"--classes-per-client {job['classes_per_client']}",
    ]
    if job.get("min_size") is not None:
        args.append(f"--min-size {job['min_size']}")
    if not job.get("cap", True):
        args.append("--no-cap")
    args.append(f"--seed {job['seed']}")
    return " ".join(args)


def calibration_job(run_id_: str, posthoc: Mapping[str, Any], file: str, where: str):
    """(calibration id, job) of a post-hoc step on a run: the id is `<run_id>/<key>` with key =
    method + hash of the resolved calibration settings (execution settings left out), so equal
    calibrations of one run are one job whichever table or figure asks for them."""
    from fedhet.posthoc.settings import resolve_settings

    try:
        settings = resolve_settings(posthoc)
    except ConfigError as err:
        raise ExperimentError(file, f"{where} → posthoc", str(err)) from None
    ident = {k: v for k, v in settings.items() if k not in POSTHOC_EXECUTION_KEYS}
    ident["version"] = catalog.version(settings["method"])
    key = f"{settings['method']}-{short_hash(ident, 8)}"
    cid = f"{run_id_}/{key}"
    return cid, {"run_id": run_id_, "key": key, "settings": settings}

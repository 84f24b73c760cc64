# The training rule's functions (train.smk): a run's inputs and its resolved settings for
# `fedhet train` (its resources: execution.smk).
import copy
import json


def partition_file(run_id):
    key = EXP.run_partition.get(run_id)
    return None if key is None else f"resources/partitions/{key}.npz"


def train_inputs(wildcards):
    """The dataset (and, for federated runs, the partition file) a run trains on, plus the
    further datasets and cached artefacts its methods read (fedhet.experiments.jobs)."""
    rid = wildcards.run_id
    inputs = {"dataset": f"resources/datasets/{EXP.run_dataset[rid]}.path"}
    for i, key in enumerate(EXP.run_extra_datasets.get(rid, [])):
        inputs[f"extra_dataset_{i}"] = f"resources/datasets/{key}.path"
    part = partition_file(rid)
    if part is not None:
        inputs["partition"] = part
    for i, aid in enumerate(EXP.run_artefacts.get(rid, [])):
        inputs[f"artefact_{i}"] = f"resources/datasets/{aid}.pt"
    return inputs


def train_run_json(wildcards, output):
    """The resolved run for `fedhet train --config-json`, pointing at its partition file.
    Taking `output` makes Snakemake leave this param out of its params rerun trigger: the
    identity is already in the run id (the path), and paths or runtime settings (device,
    checkpoint cadence) must not retrain."""
    run = copy.deepcopy(EXP.runs[wildcards.run_id])
    part = partition_file(wildcards.run_id)
    if part is not None:
        run["partition"]["file"] = part
    workers = run["runtime"]["client_workers"]
    if workers > 1 and not run["runtime"]["threads"]:
        # the job's cores shared among the clients that train at once
        run["runtime"]["threads"] = max(1, RES["threads"] // workers)
    return json.dumps(run, sort_keys=True, separators=(",", ":"))

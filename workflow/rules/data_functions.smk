# The dataset and partition rules' functions (data.smk): a dataset's name, options and download
# flag; a partition's dataset and command-line flags.
import json

from fedhet import experiments as X
from fedhet import names


def dataset_name(wildcards):
    return EXP.datasets[wildcards.dataset_key]["name"]


def dataset_options(wildcards):
    return json.dumps(EXP.datasets[wildcards.dataset_key]["options"], sort_keys=True)


def dataset_download_flag(wildcards):
    """Real datasets are downloaded on first use; stand-ins are built offline."""
    name = EXP.datasets[wildcards.dataset_key]["name"]
    return "" if name in names.standin_datasets() else "--download"


def partition_dataset(wildcards):
    return f"resources/datasets/{EXP.partitions[wildcards.partition_key]['dataset_key']}.path"


def partition_params(wildcards):
    job = EXP.partitions[wildcards.partition_key]
    return {
        "dataset": job["dataset"],
        "options": json.dumps(job["options"], sort_keys=True),
        "flags": X.partition_args(job),
    }

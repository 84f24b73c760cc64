# Datasets: one job per dataset variant (name + options), shared by every run that uses it.
# The package caches the tensors under resources/datasets/ (keyed by name and options); the
# `.path` file records where, and orders training after preparation. Runs on the submitting
# machine (downloads need the network that cluster nodes often lack).


include: "data_functions.smk"


rule prepare_data:
    output:
        "resources/datasets/{dataset_key}.path",
    log:
        "resources/logs/prepare_data/{dataset_key}.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        name=dataset_name,
        options=dataset_options,
        download=dataset_download_flag,
    shell:
        "fedhet prepare-data --dataset {params.name} --root resources/datasets"
        " --options {params.options:q} {params.download} 2> {log} | tail -n 1 > {output}"


# Partitions: one job per (dataset, scheme and its parameters, number of clients, seed); every
# run with those settings trains on the same file (results of different methods are compared on
# identical client data).
rule partition:
    input:
        partition_dataset,
    output:
        "resources/partitions/{partition_key}.npz",
    log:
        "resources/logs/partition/{partition_key}.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        job=partition_params,
    shell:
        "fedhet partition --dataset {params.job[dataset]} --root resources/datasets"
        " --options {params.job[options]:q} {params.job[flags]} --out {output} > {log} 2>&1"

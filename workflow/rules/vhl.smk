# VHL: virtual datasets as cached artefacts, their image grids (Figs 4-7) and the t-SNE of
# client features (Fig 2). Tables and curve figures of VHL use the shared table and figure rules.
#
# A virtual dataset is one job per distinct generator setting (fedhet.virtual.virtual_key), written
# to resources/datasets/virtual/<key>.pt (+ .sha256) where the VHL plug-in looks for it; every
# training run that uses it lists the file as an input (common.smk → TRAIN_EXTRA_INPUTS), so it is
# generated once and shared by all of them.


include: "vhl_common.smk"


rule vhl_virtual_data:
    input:
        vhl_virtual_inputs,
    output:
        data="resources/datasets/virtual/{virtual_key}.pt",
        checksum="resources/datasets/virtual/{virtual_key}.pt.sha256",
    log:
        "resources/logs/virtual/{virtual_key}.log",
    benchmark:
        "resources/benchmarks/virtual/{virtual_key}.tsv"
    wildcard_constraints:
        virtual_key=alternation(VIRTUAL),
    conda:
        "../../envs/fedhet.yaml"
    threads: RES["threads"]
    resources:
        mem_mb=RES["mem_mb"],
        runtime=lambda wildcards, attempt: int(RES["runtime_base"] * 2 * attempt),
    params:
        settings=vhl_virtual_settings,
    shell:
        "fedhet virtual-data --settings {params.settings:q} --root resources/datasets"
        " > {log} 2>&1"


# The VHL figures share the figure outputs' paths with the curve figures; for them these rules
# are the ones that run.
ruleorder: vhl_virtual_grid > figure
ruleorder: vhl_tsne > figure


rule vhl_virtual_grid:
    input:
        vhl_grid_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../../reports/vhl_figure.rst",
            category="{paper}",
            subcategory="figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    wildcard_constraints:
        paper="vhl",
        figure=alternation(VHL_GRID_FIGURES),
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        title=lambda wildcards: item_of(wildcards, "figure").spec["title"],
        per_class=lambda wildcards: item_of(wildcards, "figure").spec.get(
            "per_class", 8
        ),
    shell:
        "fedhet virtual-grid --data {input} --out {output} --per-class {params.per_class}"
        " --title {params.title:q} > {log} 2>&1"


rule vhl_tsne:
    input:
        vhl_tsne_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../../reports/vhl_figure.rst",
            category="{paper}",
            subcategory="figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    wildcard_constraints:
        paper="vhl",
        figure=alternation(VHL_TSNE_FIGURES),
    conda:
        "../../envs/fedhet.yaml"
    threads: 1
    params:
        runs=vhl_tsne_runs,
        labels=vhl_tsne_labels,
        clients=lambda wildcards: item_of(wildcards, "figure").spec.get("clients", 3),
        title=lambda wildcards: item_of(wildcards, "figure").spec["title"],
        note=lambda wildcards: f"scale {SCALE}: {scenario_note()} "
        + " ".join(item_of(wildcards, "figure").spec.get("note", "").split()),
    shell:
        "fedhet client-tsne --runs {params.runs} --labels {params.labels}"
        " --clients {params.clients} --out {output} --title {params.title:q}"
        " --note {params.note:q} > {log} 2>&1"

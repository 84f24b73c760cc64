# CCVR: post-hoc classifier calibration of finished runs, and the paper's analysis figures.
#
# A calibration reads a finished run's model.pt (never retrains the federation) and writes
# results/<scale>/calibrations/<run_id>/<method>-<hash>/{calibration.json,model.pt}; the key
# hashes the calibration settings (fedhet.experiments.calibration_job), so a calibration asked
# for by two tables or figures runs once. Tables read calibration.json through the shared table
# rule (cells with `posthoc` in config/papers/ccvr.yaml); the figures below read saved client
# models, the logged classifier norms and calibration outputs.


import os


include: "ccvr_common.smk"


rule calibrate:
    input:
        model="results/{scale}/runs/{run_id}/model.pt",
    output:
        json="results/{scale}/calibrations/{run_id}/{calibration_key}/calibration.json",
        model="results/{scale}/calibrations/{run_id}/{calibration_key}/model.pt",
    log:
        "results/{scale}/logs/calibrate/{run_id}/{calibration_key}.log",
    benchmark:
        "results/{scale}/benchmarks/calibrate/{run_id}/{calibration_key}.tsv"
    wildcard_constraints:
        calibration_key=r"(ccvr|oracle)-[0-9a-f]{8}",
    conda:
        "../../envs/fedhet.yaml"
    threads: RES["threads"]
    resources:
        gpu=RES["gpu"],
        mem_mb=train_mem_mb,
        runtime=lambda wildcards, attempt: int(RES["runtime_base"] * attempt),
    params:
        settings=calibration_settings,
        run=lambda wildcards, input: os.path.dirname(input.model),
        out=lambda wildcards, output: os.path.dirname(output.json),
    shell:
        "fedhet calibrate --run {params.run} --out {params.out}"
        " --settings {params.settings:q} > {log} 2>&1"


# CCVR's analysis figures share the figure outputs' paths with the curve figures; for them this
# rule is the one that runs.
ruleorder: ccvr_figure > figure


rule ccvr_figure:
    input:
        ccvr_figure_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../../reports/ccvr_figure.rst",
            category="{paper}",
            subcategory="figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    wildcard_constraints:
        paper="ccvr",
        figure=alternation(CCVR_FIGURES),
    conda:
        "../../envs/fedhet.yaml"
    threads: 1
    params:
        payload=figure_payload,
        note=scenario_note(),
        runs=f"results/{SCALE}/runs",
        calibrations=f"results/{SCALE}/calibrations",
        device=EXP.scale_config.get("runtime", {}).get("device", "auto"),
    script:
        "../scripts/ccvr_figure.py"

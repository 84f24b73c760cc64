# Post-hoc steps on finished runs (declared with kind "posthoc": CCVR's calibration and its
# oracle). A calibration reads a finished run's model.pt (never retrains the federation) and writes
# results/<scale>/calibrations/<run_id>/<method>-<hash>/{calibration.json,model.pt}; the key
# hashes the calibration settings (fedhet.experiments.calibration_job), so a calibration asked
# for by two tables or figures runs once. Tables and figures read calibration.json (cells with
# `posthoc` in a paper config).


include: "posthoc_functions.smk"


rule calibrate:
    input:
        model="results/{scale}/runs/{run_id}/model.pt",
    output:
        json="results/{scale}/calibrations/{run_id}/{calibration_key}/calibration.json",
        model="results/{scale}/calibrations/{run_id}/{calibration_key}/model.pt",
    log:
        "results/{scale}/logs/calibrate/{run_id}/{calibration_key}.log",
    wildcard_constraints:
        calibration_key=rf"({alternation(POSTHOC_METHODS)})-[0-9a-f]{{8}}",
    conda:
        "../../envs/fedhet.yaml"
    threads: RES["threads"]
    resources:
        gpu=job_gpus,
        mem_mb=train_mem_mb,
        runtime=lambda wildcards, attempt: int(RES["runtime_base"] * attempt),
    params:
        settings=calibration_settings,
        run=lambda wildcards, input: os.path.dirname(input.model),
        out=lambda wildcards, output: os.path.dirname(output.json),
    shell:
        "fedhet calibrate --run {params.run} --out {params.out}"
        " --settings {params.settings:q} > {log} 2>&1"

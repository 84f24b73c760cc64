# Training: one job per distinct resolved run (results/<scale>/runs/<run_id>/). A cell needed by
# several tables, or by two papers, names the same run id and trains once. Checkpoints live in
# results/<scale>/ckpt/<run_id>/, outside the declared outputs, so a killed or failed job
# resumes from its last checkpoint instead of starting over.
#
# No `benchmark:` here, nor on the calibration and artefact jobs: a job's shell only asks the
# fork server (fedhet.local.server) to run it, so a benchmark would time that thin client (its
# memory, its CPU), and Snakemake samples it through /proc twice a second for its first 15 s, which
# costs its own process about 0.1 s a job. A run's seconds are in its metrics.jsonl (`seconds`,
# `round_seconds`) and final.json (`mean_step_seconds`).


include: "train_functions.smk"


rule train:
    input:
        unpack(train_inputs),
    output:
        final="results/{scale}/runs/{run_id}/final.json",
        metrics="results/{scale}/runs/{run_id}/metrics.jsonl",
        resolved="results/{scale}/runs/{run_id}/resolved.yaml",
        model="results/{scale}/runs/{run_id}/model.pt",
    log:
        "results/{scale}/logs/train/{run_id}.log",
    conda:
        "../../envs/fedhet.yaml"
    threads: RES["threads"]
    resources:
        gpu=job_gpu_resource,
        gres=job_gres,
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    params:
        run=train_run_json,
        out="results/{scale}/runs/{run_id}",
        ckpt="results/{scale}/ckpt/{run_id}",
    shell:
        "fedhet train --config-json {params.run:q} --out {params.out}"
        " --ckpt-dir {params.ckpt} > {log} 2>&1"

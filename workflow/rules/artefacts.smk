# Cached artefacts: one rule per artefact family a method declares (fedhet.catalog: VHL's
# virtual datasets, FedLGD's distilled data) and some run reads, one job per artefact key, written to resources/datasets/<family>/<key>.pt
# (+ .sha256) where the method's code looks for it. Which artefacts a run reads is computed with
# the run (fedhet.experiments.jobs.artefacts): every run that needs one lists it as an input, so
# it is built once and shared by all of them.


include: "artefacts_functions.smk"


for _family in ARTEFACT_FAMILIES.values():

    rule:
        name:
            f"artefact_{_family.name}"
        input:
            lambda wildcards, f=_family: artefact_sources(f.name, wildcards.key),
        output:
            data=f"resources/datasets/{_family.name}/{{key}}.pt",
            checksum=f"resources/datasets/{_family.name}/{{key}}.pt.sha256",
        log:
            f"resources/logs/{_family.name}/{{key}}.log",
        wildcard_constraints:
            key=alternation(artefact_keys(_family.name)),
        conda:
            "../../envs/fedhet.yaml"
        threads: RES["threads"]
        resources:
            mem_mb=RES["mem_mb"],
            runtime=lambda wildcards, attempt, f=_family: int(
                RES["runtime_base"] * f.runtime_factor * attempt
            ),
        params:
            # bound per family here: a shell directive reads loop variables when a job runs
            command=lambda wildcards, f=_family: f.shell(
                artefact_settings(f.name, wildcards.key)
            ),
        shell:
            "{params.command} > {log} 2>&1"

# The HTML report (reports/<scale>/report.html): built by Snakemake's own report generator from
# every result of rule `results`. As a rule it reruns whenever a table, figure or caption changes.


rule report:
    input:
        results=all_results(),
        captions=expand(
            "reports/{caption}.rst",
            caption=["workflow", "table", "figure", "scorecard"],
        ),
    output:
        "reports/{scale}/report.html",
    log:
        "results/{scale}/logs/report.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        config=report_config(),
        config_file="results/{scale}/logs/report.config.yaml",
    shell:
        "echo {params.config:q} > {params.config_file} && snakemake results"
        " --report {output} --nolock --configfile {params.config_file} > {log} 2>&1"

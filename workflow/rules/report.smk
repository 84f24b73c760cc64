# The HTML report (reports/<scale>/report.html): built by Snakemake's own report generator from
# every result of rule `results`, then finished by `python -m fedhet.report` (the tab's title, the
# layout fixes of reports/report.css, the provenance of the build). As a rule it reruns whenever
# a table, figure, caption or the stylesheet changes.


rule report:
    input:
        results=all_results(),
        captions=expand(
            "reports/{caption}.rst",
            caption=["workflow", "table", "figure", "scorecard"]
            + (
                ["leaderboard", "leaderboard_table", "leaderboard_overview"]
                if CHALLENGERS
                else []
            ),
        ),
        css="reports/report.css",
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
        "(echo {params.config:q} > {params.config_file} && snakemake results"
        " --report {output} --nolock --configfile {params.config_file}"
        " && python -m fedhet.report {output} --config {params.config_file}"
        " --css {input.css}) > {log} 2>&1"

# The HTML report (reports/<scale>/report.html): built by Snakemake's own report generator from
# every result of rule `results`, then finished by `python -m fedhet.report` (the tab's title, the
# layout fixes and script of workflow/report/, the provenance of the build, the sidebar in the
# papers' order, the figures' notes in their captions). As a rule it reruns whenever a table,
# figure, caption (workflow/report/*.rst), the stylesheet or the script changes.


include: "report_functions.smk"


rule report:
    input:
        results=all_results(),
        captions=expand(
            "workflow/report/{caption}.rst",
            caption=["workflow", "table", "figure", "scorecard"]
            + (
                ["leaderboard", "leaderboard_table", "leaderboard_overview"]
                if CHALLENGERS
                else []
            ),
        ),
        css="workflow/report/report.css",
        js="workflow/report/report.js",
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
        " --css {input.css} --js {input.js}) > {log} 2>&1"

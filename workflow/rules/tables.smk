# Tables: one job per paper table, reading the final metrics and curves of its runs. Written as the
# long CSV shared by all papers plus Markdown and HTML laid out like the paper's table.


rule table:
    input:
        table_inputs,
    output:
        csv="results/{scale}/tables/{paper}/{table}.csv",
        md="results/{scale}/tables/{paper}/{table}.md",
        html=report(
            "results/{scale}/tables/{paper}/{table}.html",
            caption="../../reports/table.rst",
            category=report_category,
            subcategory="Tables",
            labels=report_labels,
        ),
    log:
        "results/{scale}/logs/tables/{paper}/{table}.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=table_payload,
        note=lambda wildcards: scenario_note(wildcards.paper),
    script:
        "../scripts/make_table.py"


rule scorecard:
    input:
        tables=scorecard_tables,
        text="reports/workflow.rst",
    output:
        csv="results/{scale}/scorecard.csv",
        md="results/{scale}/scorecard.md",
        html=report(
            "results/{scale}/scorecard.html",
            caption="../../reports/scorecard.rst",
            category="Scorecard",
        ),
        text="results/{scale}/report/workflow.rst",
    log:
        "results/{scale}/logs/scorecard.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=scorecard_payload,
    script:
        "../scripts/scorecard.py"

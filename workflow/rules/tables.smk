# Tables: one job per paper table, reading the final metrics and curves of its runs. Written as the
# long CSV shared by all papers plus Markdown and HTML laid out like the paper's table.


include: "tables_functions.smk"


# The scorecard's entry in the report's sidebar: first, before the papers'.
SCORECARD_CATEGORY = papers.SCORECARD_CATEGORY
SCORECARD_LABELS = {"page": "the papers' claims checked on our numbers"}


rule table:
    input:
        table_inputs,
    output:
        csv="results/{scale}/tables/{paper}/{table}.csv",
        md="results/{scale}/tables/{paper}/{table}.md",
        html=report(
            "results/{scale}/tables/{paper}/{table}.html",
            caption="../report/table.rst",
            category=report_category,
            subcategory=papers.TABLES_SUBCATEGORY,
            labels=report_labels,
        ),
    log:
        "results/{scale}/logs/tables/{paper}/{table}.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=table_payload,
        note=item_note("table"),
        comparable=COMPARABLE,
        drawn_with=DRAWN_WITH,
    script:
        "../scripts/make_table.py"


# The scorecard: every claim of the built papers checked on our numbers and the papers'. First
# in the report's sidebar; the `ci` target builds one of the claims its tables check.
rule scorecard:
    input:
        tables=scorecard_tables("all"),
    output:
        csv="results/{scale}/scorecard.csv",
        md="results/{scale}/scorecard.md",
        html=report(
            "results/{scale}/scorecard.html",
            caption="../report/scorecard.rst",
            category=SCORECARD_CATEGORY,
            labels=SCORECARD_LABELS,
        ),
    log:
        "results/{scale}/logs/scorecard.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=scorecard_payload("all"),
        drawn_with=DRAWN_WITH,
    script:
        "../scripts/scorecard.py"


use rule scorecard as ci_scorecard with:
    input:
        tables=scorecard_tables("ci"),
    output:
        csv="results/{scale}/ci/scorecard.csv",
        md="results/{scale}/ci/scorecard.md",
        html=report(
            "results/{scale}/ci/scorecard.html",
            caption="../report/scorecard.rst",
            category=SCORECARD_CATEGORY,
            labels=SCORECARD_LABELS,
        ),
    log:
        "results/{scale}/logs/ci/scorecard.log",
    localrule: True
    params:
        payload=scorecard_payload("ci"),
        drawn_with=DRAWN_WITH,

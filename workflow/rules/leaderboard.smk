# The leaderboard (`snakemake leaderboard --configfile mine.yaml`): each challenger of
# config['challengers'] joins every comparable table of config['papers'] (the paper configs'
# `challengers:` say which, and on which axis), under the table's protocol, scale and seeds. Its
# baseline cells are the papers' own runs (the same run ids, trained once); only the
# challenger's cells train. Written to results/<scale>/leaderboard/<challenger>/: each table
# with the challenger, its cells per seed (cells.csv) and the ranking (leaderboard.*), which is
# its own entry in the report. Without challengers no rule here has a job.


rule leaderboard_table:
    input:
        board_table_inputs,
    output:
        csv="results/{scale}/leaderboard/{challenger}/{paper}/{table}.csv",
        md="results/{scale}/leaderboard/{challenger}/{paper}/{table}.md",
        html=report(
            "results/{scale}/leaderboard/{challenger}/{paper}/{table}.html",
            caption="../../reports/leaderboard_table.rst",
            category=board_category,
            subcategory=report_category,
            labels=board_table_labels,
        ),
    log:
        "results/{scale}/logs/leaderboard/{challenger}/{paper}/{table}.log",
    wildcard_constraints:
        challenger=alternation(CHALLENGERS),
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=board_table_payload,
        note=lambda wildcards: board_item(wildcards).scale_changes,
        comparable=COMPARABLE,
    script:
        "../scripts/make_table.py"


rule leaderboard_ranking:
    input:
        unpack(board_inputs),
    output:
        cells="results/{scale}/leaderboard/{challenger}/cells.csv",
        csv="results/{scale}/leaderboard/{challenger}/leaderboard.csv",
        md="results/{scale}/leaderboard/{challenger}/leaderboard.md",
        html=report(
            "results/{scale}/leaderboard/{challenger}/leaderboard.html",
            caption="../../reports/leaderboard.rst",
            category=board_category,
            subcategory="0 · Leaderboard",
            labels={"table": "the challenger against each paper's methods"},
        ),
    log:
        "results/{scale}/logs/leaderboard/{challenger}/leaderboard.log",
    wildcard_constraints:
        challenger=alternation(CHALLENGERS),
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=board_payload,
    script:
        "../scripts/leaderboard.py"


# Every challenger's leaderboard, then the report (config: report_after_run).
rule leaderboard:
    input:
        leaderboard_targets,
    localrule: True

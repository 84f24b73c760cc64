# The leaderboard (`snakemake leaderboard --configfile mine.yaml`): each entry of
# config['challengers'] (a name, the method it runs and its settings) joins every comparable
# table of config['papers'] (the paper configs' `challengers:` say which, and on which axis),
# under the table's protocol, scale and seeds. Its baseline cells are the papers' own runs (the
# same run ids, trained once); only the entry's cells train. Written to
# results/<scale>/leaderboard/<entry>/: each table with the entry, its cells per seed
# (cells.csv), the ranking (leaderboard.*) and what the entry is (entry.json), its own entry in
# the report; and results/<scale>/leaderboard/overview.*, every entry side by side. The entries
# of leaderboards built before that the config does not name are kept while they are what they
# were built from (their report entries stay). Without challengers (and no leaderboard on disk)
# no rule here has a job.


include: "leaderboard_functions.smk"


rule leaderboard_table:
    input:
        board_table_inputs,
    output:
        csv="results/{scale}/leaderboard/{challenger}/{paper}/{table}.csv",
        md="results/{scale}/leaderboard/{challenger}/{paper}/{table}.md",
        html=report(
            "results/{scale}/leaderboard/{challenger}/{paper}/{table}.html",
            caption="../report/leaderboard_table.rst",
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
        drawn_with=DRAWN_WITH,
    script:
        "../scripts/make_table.py"


rule leaderboard_ranking:
    input:
        unpack(board_inputs),
    output:
        cells="results/{scale}/leaderboard/{challenger}/cells.csv",
        entry="results/{scale}/leaderboard/{challenger}/entry.json",
        csv="results/{scale}/leaderboard/{challenger}/leaderboard.csv",
        md="results/{scale}/leaderboard/{challenger}/leaderboard.md",
        html=report(
            "results/{scale}/leaderboard/{challenger}/leaderboard.html",
            caption="../report/leaderboard.rst",
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
        drawn_with=DRAWN_WITH,
    script:
        "../scripts/leaderboard.py"


# Every entry side by side: per paper and table, each entry's rank, wins / ties / losses and mean,
# with its method, package, version, code hash and settings.
rule leaderboard_overview:
    input:
        unpack(overview_inputs),
    output:
        csv="results/{scale}/leaderboard/overview.csv",
        md="results/{scale}/leaderboard/overview.md",
        html=report(
            "results/{scale}/leaderboard/overview.html",
            caption="../report/leaderboard_overview.rst",
            category=papers.leaderboard_overview_category(),
            labels={"table": "the entries side by side"},
        ),
    log:
        "results/{scale}/logs/leaderboard/overview.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=overview_payload,
        drawn_with=DRAWN_WITH,
    script:
        "../scripts/leaderboard_overview.py"


# Every entry's leaderboard and the overview, then the report (config: report_after_run).
rule leaderboard:
    input:
        leaderboard_targets,
    localrule: True

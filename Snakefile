# fedhet: regenerate the tables and figures of five federated-learning papers (VHL, FedLGD,
# FedImpro, CCVR, FedBR) next to the papers' own numbers.
#
#   snakemake --cores all                      demo scale (offline), builds reports/demo/report.html
#   snakemake --cores all --config scale=small real datasets, reduced budgets (one GPU)
#   snakemake --profile profiles/slurm --config scale=paper      one SLURM GPU job per run
#   snakemake vhl | vhl_t1 | fedimpro_t6 ...   one paper, or one table / figure
#   snakemake ci                               a small set exercising every rule and method
#   snakemake leaderboard --configfile mine.yaml  your own method in every comparable table
#
# Layout: config/ (what to run), workflow/rules/ (how), workflow/scripts/ (tables, figures),
# results/<scale>/ (runs, tables, figures), reports/<scale>/report.html.
from snakemake.utils import min_version

min_version("9.19")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/execution.smk"


report: REPORT_TEXT


wildcard_constraints:
    scale=SCALE,
    run_id=r"[A-Za-z0-9][A-Za-z0-9_.+\-]*",
    dataset_key=r"[A-Za-z0-9][A-Za-z0-9_.\-]*",
    partition_key=r"[A-Za-z0-9][A-Za-z0-9_.\-]*",
    paper=alternation(X.PAPERS),
    table=alternation(TABLE_IDS),
    figure=alternation(FIGURE_IDS),
    target=r"[a-z0-9]+(_[a-z0-9]+)*",


include: "workflow/rules/data.smk"
include: "workflow/rules/artefacts.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/posthoc.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/leaderboard.smk"
include: "workflow/rules/report.smk"


# Default target: every table and figure of config['papers'], the scorecard and the report.
rule all:
    default_target: True
    input:
        all_targets(),
    localrule: True


# Every result without the report (what the report collects).
rule results:
    input:
        all_results(),
    localrule: True


# Continuous integration: a few whole tables/figures plus selected runs (config.yaml → ci).
rule ci:
    input:
        ci_targets(),
    localrule: True


include: "workflow/rules/targets.smk"


# Jobs on this machine start from one process that has imported torch (config: forkserver).
# (What a leaderboard will train is printed while the workflow is read, under -n too:
# leaderboard.smk, announce_leaderboard.)
onstart:
    start_forkserver()


# At the end the fork server stops (execution.smk also cancels Snakemake's pending re-selections
# at exit, so that the process exits at once, even when interrupted).
onsuccess:
    stop_forkserver()


onerror:
    stop_forkserver()

# The catch-all target rule's function (targets.smk): an unknown target stops with the valid
# ones.
from snakemake.exceptions import WorkflowError

from fedhet import experiments as X


def unknown_target(wildcards):
    """Input function of the catch-all rule: an unknown target name."""
    valid = sorted([*ITEMS, *X.PAPERS, "all", "ci", "results", "leaderboard"])
    raise WorkflowError(
        f"unknown target '{wildcards.target}'; valid targets: {', '.join(valid)}"
    )

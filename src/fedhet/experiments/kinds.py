"""Kinds of paper tables (how `fedhet.tables` computes their cells)."""

# accuracy: final accuracies (and post-hoc gains); rounds_to_target: rounds and speed-ups to the
# table's target accuracy; settings: the value of one run setting per cell (no run); analytic:
# a value computed by a registered function from the cell's labels (`fedhet.tables.analytic`:
# parameter counts, FLOPs), no run
TABLE_KINDS = ("accuracy", "rounds_to_target", "settings", "analytic")
RUNLESS_KINDS = ("settings", "analytic")
# computed for the paper's settings at every scale: no change of a scale applies to them
ANALYTIC_KINDS = ("analytic",)

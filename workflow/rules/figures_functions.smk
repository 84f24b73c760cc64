# The figure rules' functions (figures.smk): which figures run locally, and each figure's kind,
# inputs and payload.
from snakemake.exceptions import WorkflowError

from fedhet.figures.kinds import FIGURE_KINDS


def figure_ids(local):
    """Wildcard constraint of the figures whose kind runs locally (or as a job): `<id>` after
    `<paper>/` in the output path, for every (paper, id) of such a kind."""
    ids = [
        f"(?<=/{i.paper}/){i.id}"
        for i in ITEMS.values()
        if i.is_figure and FIGURE_KINDS.get(i.kind).local == local
    ]
    return "|".join(sorted(ids)) or "(?!)"


def figure_kind(wildcards):
    return FIGURE_KINDS.get(item_of(wildcards, "figure").kind)


def figure_inputs(wildcards):
    """What the figure's kind reads (fedhet.figures.kinds)."""
    item = item_of(wildcards, "figure")
    try:
        return FIGURE_KINDS.get(item.kind).inputs(item, EXP, f"results/{SCALE}")
    except ValueError as err:
        raise WorkflowError(str(err)) from None


def figure_payload(wildcards):
    return item_of(wildcards, "figure").payload()

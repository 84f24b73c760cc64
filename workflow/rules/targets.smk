# Named targets: `snakemake <paper>` builds every table and figure of a paper, `snakemake
# <paper>_<id>` one of them (ids as in shared PAPER_MAP.md, lowercase: vhl_t1, vhl_fig3b, ...).
# A paper with nothing configured yet gets a target that only prints a message.


include: "targets_functions.smk"


for _target, _item in ITEMS.items():

    rule:
        name:
            _target
        input:
            item_outputs(_target),
        localrule: True


for _paper in X.PAPERS:
    if _paper in PAPERS_WITH_ITEMS:

        rule:
            name:
                _paper
            input:
                paper_outputs(_paper),
            localrule: True

    else:

        rule:
            name:
                _paper
            localrule: True
            message:
                f"{_paper}: no table or figure is configured yet "
                f"(config/papers/{_paper}.yaml); nothing to build."


# Anything else shaped like a target (`vhl_t99`, `nonexist`) stops with the list of valid targets.
rule unknown_target:
    input:
        unknown_target,
    output:
        "{target}",
    localrule: True

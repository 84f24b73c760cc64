# Figures: one job per paper figure. The figure's kind (fedhet.figures.kinds) says what it reads
# (run logs, saved models, calibrations, cached artefacts) and which script under
# workflow/scripts/figures/ draws it; cheap kinds run on the submitting machine (`figure`), the
# analyses as cluster jobs (`analysis_figure`). A new kind needs no rule.


include: "figures_functions.smk"


# Params of the figure rules (workflow/rules/figures.smk).
FIGURE_PARAMS = {
    "payload": figure_payload,
    "note": item_note("figure"),
    "script": lambda wildcards: figure_kind(wildcards).script,
    "caption": lambda wildcards: figure_kind(wildcards).caption,
    "results": f"results/{SCALE}",
    "device": EXP.scale_config.get("runtime", {}).get("device", "auto"),
    "drawn_with": DRAWN_WITH,
}


rule figure:
    input:
        figure_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../report/figure.rst",
            category=report_category,
            subcategory=papers.FIGURES_SUBCATEGORY,
            labels=report_labels,
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    wildcard_constraints:
        figure=figure_ids(local=True),
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        **FIGURE_PARAMS,
    script:
        "../scripts/figures/{params.script}.py"


rule analysis_figure:
    input:
        figure_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../report/figure.rst",
            category=report_category,
            subcategory=papers.FIGURES_SUBCATEGORY,
            labels=report_labels,
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    wildcard_constraints:
        figure=figure_ids(local=False),
    conda:
        "../../envs/fedhet.yaml"
    threads: 1
    params:
        **FIGURE_PARAMS,
    script:
        "../scripts/figures/{params.script}.py"

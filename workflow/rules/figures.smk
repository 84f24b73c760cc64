# Figures: one job per paper figure, plotted from the per-round metric logs of its runs.


rule figure:
    input:
        figure_inputs,
    output:
        report(
            "results/{scale}/figures/{paper}/{figure}.png",
            caption="../../reports/figure.rst",
            category="{paper}",
            subcategory="figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/{scale}/logs/figures/{paper}/{figure}.log",
    localrule: True
    conda:
        "../../envs/fedhet.yaml"
    params:
        payload=figure_payload,
        note=scenario_note(),
    script:
        "../scripts/plot_curves.py"

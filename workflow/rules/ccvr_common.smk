# Helpers of workflow/rules/ccvr.smk (post-hoc calibrations and CCVR's analysis figures).


def calibration_settings(wildcards, output):
    """`fedhet calibrate --settings` JSON. Taking `output` keeps this param out of Snakemake's
    rerun triggers: the settings that change the result are in the key (the path); the device
    is not."""
    cid = f"{wildcards.run_id}/{wildcards.calibration_key}"
    if cid not in EXP.calibrations:
        raise WorkflowError(
            f"unknown calibration '{cid}'; no table or figure of this scale asks for it"
        )
    settings = dict(EXP.calibrations[cid]["settings"])
    settings["device"] = EXP.scale_config.get("runtime", {}).get("device", "auto")
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


CCVR_FIGURE_KINDS = ("cka", "norms", "calibration", "wasserstein", "calibration_tsne")
CCVR_FIGURES = sorted(
    i.id for i in ITEMS.values() if i.paper == "ccvr" and i.kind in CCVR_FIGURE_KINDS
)


def ccvr_figure_inputs(wildcards):
    """Per kind: run outputs whose job also wrote what the analysis reads (client models,
    classifier_norms.jsonl), or the calibration outputs."""
    item = item_of(wildcards, "figure")
    base = f"results/{SCALE}/runs"
    if item.kind == "cka":
        return [f"{base}/{rid}/model.pt" for rid in item.run_ids()]
    if item.kind == "norms":
        return [f"{base}/{rid}/final.json" for rid in item.run_ids()]
    out = [calibration_output(cid) for cid in item.calibration_ids()]
    if item.kind == "calibration_tsne":
        out += [p.replace("calibration.json", "model.pt") for p in out]
        out += [f"{base}/{rid}/model.pt" for rid in item.run_ids()]
    return out

# The calibration rule's functions (posthoc.smk): the post-hoc methods and a calibration's
# settings.
import json
import os

from snakemake.exceptions import WorkflowError

from fedhet import catalog

POSTHOC_METHODS = catalog.names("posthoc")


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

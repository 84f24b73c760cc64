# The artefact rules' functions (artefacts.smk): the families and keys this experiment builds,
# what each build reads and its settings.
import json

from fedhet import catalog


def artefact_keys(family):
    return [a["key"] for a in EXP.artefacts.values() if a["family"] == family]


# the artefact families some configured run reads (one rule each; a family no run uses yet,
# such as FedLGD's before its tables exist, has no rule)
ARTEFACT_FAMILIES = {
    name: family
    for name, family in catalog.artefact_families().items()
    if artefact_keys(name)
}


def artefact_sources(family, key):
    """Prepared datasets an artefact's build reads (e.g. a real-image virtual source)."""
    return [
        f"resources/datasets/{d}.path"
        for d in EXP.artefacts[f"{family}/{key}"]["sources"]
    ]


def artefact_settings(family, key):
    return json.dumps(
        EXP.artefacts[f"{family}/{key}"]["settings"],
        sort_keys=True,
        separators=(",", ":"),
    )

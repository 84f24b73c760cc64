"""One list of valid names per kind (fedhet.names): the workflow's schemas agree with it, and
it is read from the registries and declarations, never mirrored."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from fedhet import names
from fedhet.experiments.kinds import TABLE_KINDS
from fedhet.figures.kinds import FIGURE_KINDS
from fedhet.tables import METRICS

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "workflow" / "schemas"


def schema(name: str) -> dict:
    return yaml.safe_load((SCHEMAS / name).read_text())


def test_schema_enums_agree_with_the_package():
    paper = schema("paper.schema.yaml")["properties"]
    config = schema("config.schema.yaml")["properties"]
    assert paper["paper"]["enum"] == list(names.PAPERS)
    assert sorted(config["papers"]["items"]["enum"]) == sorted(names.PAPERS)
    table = paper["tables"]["additionalProperties"]["properties"]
    figure = paper["figures"]["additionalProperties"]["properties"]
    assert table["kind"]["enum"] == list(TABLE_KINDS)
    assert sorted(figure["kind"]["enum"]) == sorted(FIGURE_KINDS.names())
    assert sorted(table["metrics"]["items"]["enum"]) == sorted(METRICS.names())


def test_every_paper_has_a_config_and_every_scale_a_file():
    assert sorted(p.stem for p in (ROOT / "config" / "papers").glob("*.yaml")) == sorted(
        names.PAPERS
    )
    assert names.scales(ROOT) == ["demo", "paper", "small"]


def test_names_come_from_the_registries():
    from fedhet.data import DATASETS

    assert names.datasets() == DATASETS.names()
    # FedLGD's datasets are registered, so they are valid everywhere
    assert {"synthdigits", "mnistm", "retina", "cifar10c", "digits5",
            "cifar10c_clients"} <= set(names.datasets())
    assert set(names.standin_datasets()) == {"digits10", "digits100", "digits_domains",
                                             "digits_writers", "digits_corrupted"}
    assert "convnet" in names.models() and "dirichlet" in names.schemes()
    assert "fedavg" in names.methods("algorithm", implemented=True)
    assert "fedimpro" in names.methods("plugin", implemented=True)
    assert "fedbr" in names.methods("plugin", implemented=True)
    assert {"fedlgd", "distilled"} <= set(names.methods("plugin", implemented=True))


def test_listing_names_imports_no_torch():
    import subprocess

    code = (
        "import sys; from fedhet import names; "
        "[f() for f in (names.datasets, names.models, names.schemes)]; names.methods('plugin'); "
        "from fedhet.experiments.expansion import figure_kinds; figure_kinds(); "
        "from fedhet.tables import METRICS; METRICS.names(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

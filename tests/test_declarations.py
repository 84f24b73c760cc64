"""Methods declared once (fedhet.declare, fedhet.catalog): run identity stays stable by rule,
config grids compose plug-ins, pending and quoted cells, and no common module names a method."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from fedhet import catalog, config, names
from fedhet import experiments as X
from fedhet.declare import Method, Param

ROOT = Path(__file__).resolve().parents[1]
RUN_IDS = ROOT / "tests" / "data" / "run_ids.json"
CONFIGURED = ["vhl", "ccvr", "fedimpro"]


def resolved_ids(scale: str, exp: X.Experiment | None = None) -> dict[str, list[str]]:
    exp = exp or X.load_experiment({"scale": scale, "papers": CONFIGURED}, ROOT)
    return {
        "runs": sorted(exp.runs),
        "calibrations": sorted(exp.calibrations),
        "partitions": sorted(exp.partitions),
        "virtual": sorted(a["key"] for a in exp.artefacts.values() if a["family"] == "virtual"),
    }


@pytest.fixture(scope="module")
def demo():
    """The demo scale of the configured papers, expanded once for the module's tests (before
    any of them patches the declarations)."""
    return X.load_experiment({"scale": "demo", "papers": CONFIGURED}, ROOT)


@pytest.mark.parametrize("scale", ["demo", "small", "paper"])
def test_run_ids_match_the_checked_in_list(scale, request):
    """Every run, calibration, partition and virtual-data key of today, at every scale. A new
    paper's runs are additions: regenerate the list (see `write_run_ids` below) and check that
    the diff only adds lines."""
    expected = json.loads(RUN_IDS.read_text())[scale]
    now = resolved_ids(scale, request.getfixturevalue("demo") if scale == "demo" else None)
    for kind, ids in expected.items():
        missing = sorted(set(ids) - set(now[kind]))
        added = sorted(set(now[kind]) - set(ids))
        assert not missing, f"{scale}: {len(missing)} {kind} changed id, e.g. {missing[:3]}"
        assert not added, (
            f"{scale}: {len(added)} new {kind} (e.g. {added[:3]}); if intended, regenerate "
            f"tests/data/run_ids.json with `python tests/test_declarations.py`"
        )


def write_run_ids() -> None:
    data = {scale: resolved_ids(scale) for scale in ("demo", "small", "paper")}
    RUN_IDS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- identity rule


@pytest.fixture
def demo_ids(demo):
    return sorted(demo.runs)


def test_a_setting_added_at_its_default_changes_no_run_id(monkeypatch, demo_ids):
    settings = {**config.SETTINGS, "training": {**config.SETTINGS["training"]}}
    settings["training"]["label_smoothing"] = Param(0.0, "added for this test", since=1)
    monkeypatch.setattr(config, "SETTINGS", settings)
    assert sorted(X.load_experiment({"scale": "demo", "papers": CONFIGURED}, ROOT).runs) == demo_ids
    run = config.resolve_run({})
    assert run["training"]["label_smoothing"] == 0.0
    changed = config.resolve_run({"training": {"label_smoothing": 0.1}})
    assert config.run_id(changed) != config.run_id(run)


def test_a_method_parameter_added_at_its_default_changes_no_run_id(monkeypatch, demo_ids):
    declared = dict(catalog._declarations())
    vhl = declared["vhl"]
    params = {**vhl.params, "warmup_rounds": Param(0, "added for this test", since=1)}
    declared["vhl"] = dataclasses.replace(vhl, params=params)
    monkeypatch.setattr(catalog, "_declarations", lambda: declared)
    assert sorted(X.load_experiment({"scale": "demo", "papers": CONFIGURED}, ROOT).runs) == demo_ids
    run = config.resolve_run({"plugins": [{"name": "vhl"}]})
    other = config.resolve_run({"plugins": [{"name": "vhl", "params": {"warmup_rounds": 3}}]})
    assert run["plugins"][0]["params"]["warmup_rounds"] == 0
    assert config.run_id(other) != config.run_id(run)


def test_a_version_bump_changes_exactly_that_methods_runs(monkeypatch, demo):
    exp = demo
    declared = dict(catalog._declarations())
    declared["feddf"] = dataclasses.replace(declared["feddf"], version=99)
    monkeypatch.setattr(catalog, "_declarations", lambda: declared)
    for rid, run in exp.runs.items():
        uses = any(p["name"] == "feddf" for p in run["plugins"])
        assert (config.run_id(run) != rid) == uses


# ----------------------------------------------------------------------------- grids


@pytest.fixture()
def tree(tmp_path):
    """A copy of config/ with a small FedBR config to edit."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


def write_paper(tree: Path, protocol: dict, table: dict) -> None:
    cfg = {
        "paper": "fedbr",
        "title": "test",
        "protocols": {"main": protocol},
        "tables": {"t1": {"title": "T1", "kind": "accuracy", "protocol": "main", **table}},
        "figures": {},
        "claims": [],
    }
    (tree / "config" / "papers" / "fedbr.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


PROTOCOL = {
    "settings": {"dataset": {"name": "cifar10"}, "training": {"rounds": 100}},
    "values": {
        "method": {
            "base": {"label": "FedAvg"},
            "clsnorm": {"set": {"plugins": [{"name": "clsnorm"}]}},
            "clsprox": {"set": {"plugins": [{"name": "clsprox", "params": {"mu": 0.5}}]}},
            "fedcm": {"set": {"algorithm": {"name": "fedcm"}}},
            "fedntd": {"set": {"plugins": [{"name": "fedntd"}]}},
            "quoted": {"label": "FedX", "quoted": "FedX paper"},
        },
        "extra": {
            "none": {"label": "-"},
            "prox": {"set": {"plugins": [{"name": "clsprox", "params": {"mu": 0.1}}]}},
        },
    },
}


def cells_of(tree: Path, **config_over):
    exp = X.load_experiment({"scale": "demo", "papers": ["fedbr"], **config_over}, tree, ["fedbr"])
    return exp, {tuple(c.labels.values()): c for c in exp.items["fedbr_t1"].cells}


def test_plugin_lists_merge_by_name_across_axes(tree):
    write_paper(
        tree,
        PROTOCOL,
        {"rows": ["method"], "columns": ["extra"],
         "grids": [{"axes": {"method": ["clsnorm", "clsprox"], "extra": ["none", "prox"]}}]},
    )
    exp, cells = cells_of(tree)
    plugins = {k: exp.runs[c.run_ids[0]]["plugins"] for k, c in cells.items()}
    assert [p["name"] for p in plugins[("clsnorm", "prox")]] == ["clsnorm", "clsprox"]
    assert plugins[("clsnorm", "prox")][1]["params"]["mu"] == 0.1
    # one plug-in named twice: one entry, the later axis's parameters win
    assert [p["name"] for p in plugins[("clsprox", "prox")]] == ["clsprox"]
    assert plugins[("clsprox", "prox")][0]["params"]["mu"] == 0.1
    assert plugins[("clsprox", "none")][0]["params"]["mu"] == 0.5


def test_pending_algorithms_and_plugins_and_quoted_cells(tree, monkeypatch):
    monkeypatch.setitem(catalog._declarations(), "pendalgo", Method(
        name="pendalgo", kind="algorithm", summary="a pending toy algorithm of the tests",
        implemented=False))
    monkeypatch.setitem(catalog._declarations(), "pendplug", Method(
        name="pendplug", kind="plugin", summary="a pending toy plug-in of the tests",
        implemented=False))
    protocol = copy.deepcopy(PROTOCOL)
    protocol["values"]["method"]["pendalgo"] = {"set": {"algorithm": {"name": "pendalgo"}}}
    protocol["values"]["method"]["pendplug"] = {"set": {"plugins": [{"name": "pendplug"}]}}
    write_paper(
        tree,
        protocol,
        {"rows": ["method"], "grids": [{
            "axes": {"method": ["base", "pendalgo", "pendplug", "quoted"]},
            "reference": {"base": 70.0, "pendalgo": 71.0, "pendplug": 72.0, "quoted": 73.5},
        }]},
    )
    exp, cells = cells_of(tree)
    assert cells[("base",)].run_ids and cells[("base",)].pending is None
    assert cells[("pendalgo",)].run_ids == []
    assert cells[("pendalgo",)].pending == "method not implemented yet: pendalgo"
    assert cells[("pendplug",)].pending == "method not implemented yet: pendplug"
    quoted = cells[("quoted",)]
    assert quoted.run_ids == [] and quoted.pending is None and quoted.quoted == "FedX paper"
    assert quoted.reference == {"acc": 73.5}
    assert quoted.key()["quoted"] == "FedX paper" and "quoted" not in cells[("base",)].key()
    assert len(exp.runs) == 1


def test_unknown_method_names_stop_with_the_valid_ones(tree):
    protocol = {**PROTOCOL, "values": {"method": {"x": {"set": {"plugins": [{"name": "fedxyz"}]}}}}}
    write_paper(tree, protocol, {"rows": ["method"], "grids": [{"axes": {"method": ["x"]}}]})
    with pytest.raises(X.ExperimentError, match=r"unknown plugin 'fedxyz'; valid: .*fedbr"):
        cells_of(tree)


def test_an_item_may_run_its_own_seeds(tree):
    write_paper(
        tree,
        PROTOCOL,
        {"rows": ["method"], "seeds": [0, 1, 2], "grids": [{"axes": {"method": ["base"]}}]},
    )
    exp, cells = cells_of(tree, seeds=[5])
    assert [exp.runs[r]["seed"] for r in cells[("base",)].run_ids] == [0, 1, 2]


# ----------------------------------------------------------------------------- declarations


def test_every_declaration_is_complete():
    for decl in catalog.methods():
        assert decl.summary, decl.name
        for pname, param in decl.params.items():
            assert param.meaning, f"{decl.name}.{pname} has no meaning"
        if decl.implemented and decl.kind != "posthoc":
            impl = catalog.implementation(decl.name)
            assert impl is not None
    assert set(names.methods("algorithm", implemented=True)) == {
        "fedavg", "fedavgm", "fedcm", "feddyn", "fednova", "fedprox", "groupdro", "local",
        "moon", "scaffold",
    }


def test_each_artefact_family_is_declared_by_its_method():
    families = catalog.artefact_families()
    assert sorted(families) == ["distilled", "virtual"]
    assert "virtual" in [f.name for f in catalog.method("vhl").artefact_families]
    assert "distilled" in [f.name for f in catalog.method("distilled").artefact_families]


# (fedhet.names lists the papers, some of which share their method's name.)
COMMON = [
    "src/fedhet/config.py",
    "src/fedhet/catalog.py",
    "src/fedhet/declare.py",
    "src/fedhet/plugins.py",
    *[str(p.relative_to(ROOT)) for p in (ROOT / "src/fedhet/experiments").glob("*.py")],
    *[str(p.relative_to(ROOT)) for p in (ROOT / "src/fedhet/engine").glob("*.py")],
    *[str(p.relative_to(ROOT)) for p in (ROOT / "src/fedhet/tables").glob("*.py")],
]
# FedAvg is the default algorithm, and what a pending algorithm's cell resolves with to show
# its other settings.
ALLOWED = {"fedavg"}


@pytest.mark.parametrize("path", COMMON)
def test_common_code_names_no_method(path):
    methods = set(catalog.names()) - ALLOWED
    tree = ast.parse((ROOT / path).read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    named = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings and node.value in methods
    }
    assert not named, f"{path} names methods {sorted(named)}: read their declarations instead"


def test_workflow_rules_name_no_method():
    methods = set(catalog.names()) - ALLOWED
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        code = "\n".join(
            line.split("#", 1)[0] for line in path.read_text().splitlines()
        )
        found = {m for m in methods if re.search(rf"[\"']{m}[\"']", code)}
        assert not found, f"{path.name} names methods {sorted(found)}"
    assert "ruleorder" not in "".join(p.read_text() for p in (ROOT / "workflow").rglob("*.smk"))


if __name__ == "__main__":
    write_run_ids()

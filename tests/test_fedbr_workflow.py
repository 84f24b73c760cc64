"""FedBR's tables and figures as grids: nothing pending, shared cells are one run, per-dataset
settings reach the runs (λ, proxy, rotations, models), plug-in lists from two axes merge, the
demo's per-paper scale keys apply to FedBR only, and a composed run trains."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from fedhet.train import train

ROOT = Path(__file__).resolve().parents[1]


def experiment(scale: str, papers=("fedbr",)):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return X.load_experiment({**cfg, "scale": scale, "skip_plugins": []}, ROOT, papers=list(papers))


@pytest.fixture(scope="module")
def paper():
    return experiment("paper")


@pytest.fixture(scope="module")
def demo():
    return experiment("demo", ("fedbr", "vhl"))


def cell(item, **labels):
    found = [c for c in item.cells if all(c.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, len(found))
    return found[0]


def plugin(settings, name):
    return next(p["params"] for p in settings["plugins"] if p["name"] == name)


def test_no_fedbr_cell_is_pending(paper, demo):
    for exp in (paper, demo):
        for key, item in exp.items.items():
            if key.startswith("fedbr_"):
                assert item.cells and not [c.labels for c in item.cells if c.pending], key


def test_shared_cells_are_one_run(paper):
    fedavg = cell(paper.items["fedbr_t1"], dataset="c10rot", method="fedavg").run_ids
    assert cell(paper.items["fedbr_t3"], dataset="c10rot", method="fedavg", addon="none").run_ids \
        == fedavg
    assert cell(paper.items["fedbr_t4"], dataset="c10rot", method="fedavg").run_ids == fedavg
    assert cell(paper.items["fedbr_t7"], dataset="c10rot", method="fedavg").run_ids == fedavg
    # FedBR + Mixup of Table 1 is FedBR on Table 4's Mixup backbone (plug-in lists merge by name)
    assert cell(paper.items["fedbr_t4"], dataset="c100", method="fedbr").run_ids == \
        cell(paper.items["fedbr_t1"], dataset="c100", method="fedbr-mixup").run_ids
    assert cell(paper.items["fedbr_t7"], dataset="c100", method="fedbr-once").run_ids == \
        cell(paper.items["fedbr_t2"], dataset="c100", method="fedbr-once").run_ids


def test_per_dataset_settings_reach_the_runs(paper):
    t1 = paper.items["fedbr_t1"]
    rmnist = cell(t1, dataset="rmnist", method="fedbr").settings
    c10 = cell(t1, dataset="c10rot", method="fedbr").settings
    c100 = cell(t1, dataset="c100", method="fedbr").settings
    assert plugin(rmnist, "fedbr")["lam"] == 1.0 and plugin(c10, "fedbr")["lam"] == 0.1
    assert plugin(c100, "fedbr")["lam"] == 1.0
    assert rmnist["eval"]["rotations"] == [0, 15, 30, 45, 60, 75, 90, 105, 120, 135]
    assert c100["eval"]["rotations"] == [] and c100["training"]["momentum"] == 0.9
    assert c10["model"]["name"] == "vgg11" and c10["model"]["options"]["fc"] is False
    assert c10["partition"]["options"]["rotation_mode"] == "mixture"
    assert rmnist["training"]["local_steps"] == 50 and rmnist["training"]["lr"] == 0.001
    # an entry that sets λ keeps it: the look-up only fills what is left unset
    comp2 = cell(paper.items["fedbr_t4"], dataset="c10rot", method="comp2").settings
    assert plugin(comp2, "fedbr")["lam"] == 0.0
    code = cell(paper.items["fedbr_x1"], dataset="c10rot", method="fedbr-code-lam").settings
    assert plugin(code, "fedbr")["lam"] == 1.0
    # Table 3: FedCM (the method axis) with FedBR's Mixture (the addon axis) and Mixup (backbone)
    t3 = cell(paper.items["fedbr_t3"], dataset="c100", method="fedcm", addon="fedbr").settings
    assert t3["algorithm"]["name"] == "fedcm"
    assert [p["name"] for p in t3["plugins"]] == ["mixup", "fedbr"]  # in the axes' order
    assert plugin(t3, "fedbr")["pseudo"] == "mixture" and plugin(t3, "fedbr")["proxy"] == "cifar10"
    moon = cell(t1, dataset="c10rot", method="moon").settings
    assert moon["model"]["options"]["projection"] == {"hidden": 256, "dim": 128}


def test_the_demo_shrinks_fedbr_only(demo):
    t1 = demo.items["fedbr_t1"]
    fedavg = cell(t1, dataset="c10rot", method="fedavg").settings
    assert fedavg["training"]["local_steps"] == 5 and fedavg["training"]["lr"] == 0.05
    assert fedavg["model"]["name"] == "cnn4" and fedavg["model"]["options"] == {}  # no `fc`
    assert {c.labels["dataset"] for c in t1.cells} == {"c10rot"}  # restricted
    moon = cell(t1, dataset="c10rot", method="moon").settings
    assert moon["model"]["options"] == {"projection": {"hidden": 256, "dim": 128}}
    mixture = cell(demo.items["fedbr_t3"], dataset="c10rot", method="fedcm", addon="fedbr")
    assert plugin(mixture.settings, "fedbr")["proxy"] == "digits100"  # mapped like a dataset
    vhl = next(iter(demo.items["vhl_t1"].cells)).settings
    assert vhl["training"]["local_steps"] is None and vhl["training"]["lr"] != 0.05
    c100 = cell(demo.items["fedbr_t6"], method="fedavg").settings
    assert c100["dataset"]["options"]["train_per_class"] == 100  # the per-paper stand-in
    assert c100["training"]["rounds"] == 16  # 800 × 0.012 = 10, at least 16 for FedBR


def test_every_reference_number_is_in_the_paper_text():
    text = (ROOT.parent / "shared" / "seeds" / "fedbr.txt")
    if not text.exists():
        pytest.skip("the paper's text is not beside the repository")
    words = text.read_text()
    config = yaml.safe_load((ROOT / "config" / "papers" / "fedbr.yaml").read_text())

    def numbers(node):
        if isinstance(node, dict):
            for v in node.values():
                yield from numbers(v)
        elif isinstance(node, list):
            for v in node:
                yield from numbers(v)
        elif isinstance(node, float) and not math.isnan(node):
            yield node

    missing = set()
    for table in config["tables"].values():
        for grid in table.get("grids") or []:
            for value in numbers(grid.get("reference") or {}):
                if f"{value:.2f}" not in words and f"{value:g}" not in words:
                    missing.add(value)
    assert not missing, sorted(missing)


def test_a_composed_run_trains(tmp_path):
    """FedCM + Mixup + FedBR (Mixture, a proxy dataset) + FedNTD: four methods, one run."""
    run = {
        "seed": 0,
        "dataset": {"name": "digits10", "root": str(tmp_path / "data"),
                    "options": {"train_per_class": 12, "test_per_class": 3}},
        "model": {"name": "cnn4", "width": 0.25},
        "partition": {"num_clients": 4, "min_size": 2, "root": str(tmp_path / "parts"),
                      "scheme": "rotation", "options": {"base": "dirichlet_client"}},
        "algorithm": {"name": "fedcm"},
        "plugins": [{"name": "mixup"},
                    {"name": "fedbr", "params": {"pseudo": "mixture", "proxy": "digits100",
                                                 "proxy_options": {"train_per_class": 2}}},
                    {"name": "fedntd"}],
        "training": {"rounds": 2, "clients_per_round": 2, "batch_size": 8, "local_steps": 3,
                     "lr": 0.05},
        "eval": {"rotations": [0, 90]},
        "runtime": {"device": "cpu"},
    }
    final = train(run, tmp_path / "out", log=lambda m: None)
    assert final["status"] == "completed" and math.isfinite(final["top5_mean_acc"])

"""FedImpro's tables and figures as grids: nothing pending at demo scale, the cells that the
paper prints twice share one run, quoted cells have no run, the scales shrink the weight ramp."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X

ROOT = Path(__file__).resolve().parents[1]


def experiment(scale: str):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return X.load_experiment({**cfg, "scale": scale, "skip_plugins": []}, ROOT,
                             papers=["fedimpro", "vhl"])


@pytest.fixture(scope="module")
def demo():
    return experiment("demo")


def cell(item, **labels):
    found = [c for c in item.cells if all(c.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, len(found))
    return found[0]


def test_no_fedimpro_cell_is_pending_at_demo_scale(demo):
    for key, item in demo.items.items():
        if key.startswith("fedimpro_"):
            assert not [c.labels for c in item.cells if c.pending], key


def test_the_same_fedimpro_cell_is_one_run_across_tables(demo):
    t1 = cell(demo.items["fedimpro_t1"], dataset="cifar10", setting="a01-e1-k10",
              algorithm="fedimpro")
    assert len(t1.run_ids) == 1
    assert cell(demo.items["fedimpro_t3"], split="s2").run_ids == t1.run_ids
    assert cell(demo.items["fedimpro_t7"], noise="n0").run_ids == t1.run_ids
    assert cell(demo.items["fedimpro_x1"], dataset="cifar10", algorithm="fedimpro").run_ids \
        == t1.run_ids
    assert demo.items["fedimpro_fig11"].run_ids() == t1.run_ids
    for setting in ("a01-e1-k10", "a005-e1-k10", "a01-e5-k10", "a01-e1-k100"):
        for algorithm in ("fedavg", "fedimpro"):
            assert cell(demo.items["fedimpro_t11"], setting=setting, algorithm=algorithm).run_ids \
                == cell(demo.items["fedimpro_t1"], dataset="cifar10", setting=setting,
                        algorithm=algorithm).run_ids
    more = cell(demo.items["fedimpro_t11"], setting="a01-e1-k100-m20", algorithm="fedimpro")
    assert more.settings["training"]["clients_per_round"] == 20


def test_fedimpro_settings_reach_the_runs(demo):
    t1 = cell(demo.items["fedimpro_t1"], dataset="cifar10", setting="a01-e1-k10",
              algorithm="fedimpro")
    params = t1.settings["plugins"][0]["params"]
    assert params["split"] == 2 and params["weight_ramp_epochs"] == 10  # 500 × 0.02 at demo
    assert params["estimator_weight"] == "paper" and params["sample_from"] == "global"
    code = cell(demo.items["fedimpro_x1"], dataset="cifar10", algorithm="fedimpro-code")
    assert code.settings["plugins"][0]["params"]["estimator_weight"] == "code"
    assert code.settings["plugins"][0]["params"]["sample_from"] == "local"
    s4 = cell(demo.items["fedimpro_t3"], split="s4")
    assert s4.settings["plugins"][0]["params"]["split"] == "penultimate"
    t9 = cell(demo.items["fedimpro_t9"], algorithm="fedimpro")
    assert t9.settings["model"]["name"] == "cnn4"  # the demo's stand-in for VGG-9
    assert t9.settings["plugins"][0]["params"]["split"] == 3
    paper = experiment("paper")
    t9_paper = cell(paper.items["fedimpro_t9"], algorithm="fedimpro")
    assert t9_paper.settings["model"]["name"] == "vgg9"
    from fedhet.models import build_model

    assert build_model("vgg9", 10, 3, 32, 1.0).split_point(3) == "conv"
    small = experiment("small")
    t1_small = cell(small.items["fedimpro_t1"], dataset="cifar10", setting="a01-e1-k10",
                    algorithm="fedimpro")
    assert t1_small.settings["plugins"][0]["params"]["weight_ramp_epochs"] == 50


def test_quoted_cells_show_the_paper_and_have_no_run(demo):
    t10 = demo.items["fedimpro_t10"]
    quoted = [c for c in t10.cells if c.quoted]
    assert {c.labels["algorithm"] for c in quoted} == {
        "feddyn-quoted", "fedspeed", "ccvr-quoted", "feddf-quoted", "spherefed"}
    assert all(not c.run_ids and c.reference for c in quoted)
    ours = [c for c in t10.cells if not c.quoted]
    assert len(ours) == 4 and all(c.run_ids for c in ours)

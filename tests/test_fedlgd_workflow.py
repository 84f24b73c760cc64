"""FedLGD's tables and figures as grids: every cell has a run, a row's per-client cells share
one run, the look-ups (IPC, λ per dataset) reach the runs, one distilled artefact serves every
run that can share it, the demo's per-paper scale shrinks FedLGD only (sweeps stay sweeps), and
`snakemake` builds one job per artefact."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from test_workflow import dry_run_in_a_copy

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ["mnist", "svhn", "usps", "synthdigits", "mnistm", "avg"]
BASELINES = ["fedavg", "fedprox", "fednova", "scaffold", "moon", "vhl"]


def experiment(scale: str):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return X.load_experiment({**cfg, "scale": scale, "skip_plugins": []}, ROOT,
                             papers=["fedlgd"])


@pytest.fixture(scope="module")
def paper():
    return experiment("paper")


@pytest.fixture(scope="module")
def demo():
    return experiment("demo")


def cells(item, **labels):
    return [c for c in item.cells if all(c.labels.get(k) == v for k, v in labels.items())]


def plugin(settings, name):
    return next(p["params"] for p in settings["plugins"] if p["name"] == name)


def test_no_fedlgd_cell_is_pending(paper, demo):
    for exp in (paper, demo):
        for key, item in exp.items.items():
            if key.startswith("fedlgd_"):
                assert item.cells and not [c.labels for c in item.cells if c.pending], key


def test_table1_is_28_runs_and_168_cells_and_a_row_shares_its_run(paper):
    t1 = paper.items["fedlgd_t1"]
    assert len(t1.cells) == 168 and len({c.run_ids[0] for c in t1.cells}) == 28
    for method in [*BASELINES, "fedlgd"]:
        for arch in ("resnet18in", "convnet"):
            for ipc in ("ipc10", "ipc50"):
                row = cells(t1, method=method, arch=arch, ipc=ipc)
                assert sorted(c.labels["client"] for c in row) == sorted(CLIENTS)
                assert len({tuple(c.run_ids) for c in row}) == 1
                assert {c.values["domain"] for c in row} == {*CLIENTS[:-1], "mean"}


def test_lookups_reach_the_runs(paper):
    t1, t2, t4 = (paper.items[f"fedlgd_{t}"] for t in ("t1", "t2", "t4"))
    fedlgd = cells(t1, method="fedlgd", arch="convnet", ipc="ipc50", client="avg")[0].settings
    assert plugin(fedlgd, "fedlgd")["ipc"] == 50 and plugin(fedlgd, "fedlgd")["lambda"] == 10.0
    fedavg = cells(t1, method="fedavg", arch="convnet", ipc="ipc10", client="avg")[0].settings
    assert plugin(fedavg, "distilled")["ipc"] == 10
    assert fedavg["algorithm"]["name"] == "fedavg" and fedavg["training"]["lr"] == 0.01
    assert plugin(cells(t2, method="fedlgd", ratio="r1", ipc="ipc10")[0].settings,
                  "fedlgd")["lambda"] == 1.0
    retina = cells(t4, method="fedlgd", arch="convnet", client="avg")[0].settings
    assert plugin(retina, "fedlgd")["lambda"] == 0.1 and retina["training"]["lr"] == 0.001
    # Table 2's client ratio: int(ratio · 57) clients a round
    per_round = {r: cells(t2, method="fedavg", ratio=r, ipc="ipc10")[0].settings["training"][
        "clients_per_round"] for r in ("r02", "r05", "r1")}
    assert per_round == {"r02": 11, "r05": 28, "r1": 57}
    vhl = cells(t1, method="vhl", arch="convnet", ipc="ipc10", client="avg")[0].settings
    assert [p["name"] for p in vhl["plugins"]] == ["distilled", "vhl"]  # the data plug-in first


def test_one_artefact_per_distillation_setting(paper):
    """The key ignores the model, λ and the client ratio: Table 1's two models share an
    artefact per IPC, Table 2's 42 runs share two; a changed initialisation is its own (per
    seed: the distillation's seed is the run's)."""
    def artefacts(item):
        return {a for c in item.cells for a in paper.run_artefacts.get(c.run_ids[0], [])
                if a.startswith("distilled/")}

    assert len(artefacts(paper.items["fedlgd_t1"])) == 2
    assert len(artefacts(paper.items["fedlgd_t2"])) == 2
    assert len(artefacts(paper.items["fedlgd_t9"])) == 3  # noise, normal, real


def test_the_demo_shrinks_fedlgd_only_and_sweeps_stay_sweeps(demo):
    t1 = demo.items["fedlgd_t1"]
    run = cells(t1, method="fedlgd", arch="convnet", ipc="ipc50", client="avg")[0].settings
    p = plugin(run, "fedlgd")
    assert (p["ipc"], p["server_ipc"], p["local_steps"], p["server_steps"]) == (10, 2, 5, 10)
    assert run["dataset"]["name"] == "digits_domains" and run["training"]["rounds"] == 10
    assert run["model"] == {"name": "convnet", "width": 0.25, "options": {}}
    steps = {c.labels["lsteps"]: plugin(c.settings, "fedlgd")["local_steps"]
             for c in demo.items["fedlgd_fig3c"].cells}
    assert steps == {"ls50": 2, "ls100": 5, "ls200": 10}
    batches = {c.labels["batch"]: c.run_ids[0] for c in demo.items["fedlgd_t8"].cells}
    assert len(set(batches.values())) == len(batches)  # Table 8's batch sizes stay distinct
    cifar = cells(demo.items["fedlgd_t2"], method="fedavg", ratio="r1")[0].settings
    assert cifar["dataset"]["name"] == "digits_corrupted"
    assert cifar["partition"]["num_clients"] == 12  # the stand-in's 12 domains


def test_seeded_curves_run_three_seeds(demo):
    fig6 = demo.items["fedlgd_fig6"]
    assert all(len(c.run_ids) == 3 for c in fig6.cells)
    assert fig6.run_ids() == demo.items["fedlgd_fig5"].run_ids()


def test_every_reference_number_is_in_the_paper_text():
    text = ROOT.parent / "shared" / "seeds" / "fedlgd.txt"
    if not text.exists():
        pytest.skip("the paper's text is not beside the repository")
    words = text.read_text()
    config = yaml.safe_load((ROOT / "config" / "papers" / "fedlgd.yaml").read_text())

    def numbers(node):
        if isinstance(node, dict):
            for v in node.values():
                yield from numbers(v)
        elif isinstance(node, float) and not math.isnan(node):
            yield node

    missing = {v for table in config["tables"].values() for grid in table["grids"]
               for v in numbers(grid.get("reference") or {}) if f"{v:.1f}" not in words}
    assert not missing, sorted(missing)


def test_dry_run_builds_one_distillation_job_for_the_runs_that_share_it(demo, tmp_path):
    """Table 1's ConvNet and ResNet-18 runs at one IPC read one artefact: one job."""
    row = [c for c in demo.items["fedlgd_t1"].cells
           if c.labels["ipc"] == "ipc10" and c.labels["client"] == "avg"
           and c.labels["method"] in ("fedavg", "fedlgd")]
    targets = [f"results/demo/runs/{c.run_ids[0]}/final.json" for c in row]
    proc = dry_run_in_a_copy(tmp_path, "--forceall", *targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blocks = (proc.stdout + proc.stderr).split("\nrule ")
    distilled = [b for b in blocks if b.startswith("artefact_distilled:")]
    train = [b for b in blocks if b.startswith("train:")]
    assert len(distilled) == 1 and len(train) == 4
    path = distilled[0].split("output: ")[1].split(",")[0].strip()
    assert path.startswith("resources/datasets/distilled/distilled-digits-domains-")
    assert all(path in b for b in train)

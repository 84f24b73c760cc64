"""The resolver of paper configs into runs (fedhet.experiments): run ids, grid expansion, shared
runs, per-cell settings, scales and config errors."""

from __future__ import annotations

import copy
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from fedhet import names
from fedhet.config import resolve_run, run_id

ROOT = Path(__file__).resolve().parents[1]


# the methods themselves are left out (pending) so that the tests do not depend on which
# plug-ins the package implements at the moment
SKIP = ["vhl", "fedimpro"]


def base_config(**over):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = SKIP
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def demo():
    return X.load_experiment(base_config(scale="demo"), ROOT)


@pytest.fixture(scope="module")
def demo_whole(tmp_path_factory):
    """The demo scale without its `restrict` (the papers' whole grids, one seed)."""
    root = tmp_path_factory.mktemp("whole")
    shutil.copytree(ROOT / "config", root / "config")
    scale = root / "config" / "scales" / "demo.yaml"
    data = yaml.safe_load(scale.read_text())
    data.pop("restrict")
    scale.write_text(yaml.safe_dump(data))
    return X.load_experiment(base_config(scale="demo"), root)


@pytest.fixture(scope="module")
def paper():
    return X.load_experiment(base_config(scale="paper"), ROOT)


def test_pending_until_the_package_implements_the_plugin(monkeypatch):
    import dataclasses

    from fedhet import catalog

    exp = X.load_experiment(base_config(skip_plugins=[]), ROOT)
    cells = [c for c in exp.items["vhl_t1"].cells if c.labels["method"] == "vhl"]
    assert all(c.pending is None and len(c.run_ids) == 1 for c in cells)
    assert all(exp.runs[c.run_ids[0]]["plugins"][0]["name"] == "vhl" for c in cells)
    base = {c.run_ids[0] for c in exp.items["vhl_t1"].cells if c.labels["method"] == "base"}
    assert not base & {c.run_ids[0] for c in cells}
    # skipped by config
    exp = X.load_experiment(base_config(skip_plugins=["vhl"]), ROOT)
    cells = [c for c in exp.items["vhl_t1"].cells if c.labels["method"] == "vhl"]
    assert all(c.run_ids == [] and "skip_plugins" in c.pending for c in cells)
    # declared, not implemented
    declared = dict(catalog._declarations())
    declared["vhl"] = dataclasses.replace(declared["vhl"], implemented=False)
    monkeypatch.setattr(catalog, "_declarations", lambda: declared)
    exp = X.load_experiment(base_config(skip_plugins=[]), ROOT)
    cells = [c for c in exp.items["vhl_t1"].cells if c.labels["method"] == "vhl"]
    assert all(c.run_ids == [] and "not implemented yet: vhl" in c.pending for c in cells)
    with pytest.raises(X.ExperimentError, match="skip_plugins.*unknown plug-in 'vhll'"):
        X.load_experiment(base_config(skip_plugins=["vhll"]), ROOT)


def labels_of(cell, *axes):
    return tuple(cell.labels[a] for a in axes)


# ----------------------------------------------------------------------------- run ids


def test_same_settings_same_id_and_any_change_a_new_one(demo):
    run = next(iter(demo.runs.values()))
    assert run_id(resolve_run(copy.deepcopy(run))) == run_id(run)
    changes = [
        ("training", "lr", 0.123),
        ("training", "rounds", 7),
        ("partition", "alpha", 0.5),
        ("model", "width", 0.75),
        ("dataset", "options", {"channels": 1}),
    ]
    seen = {run_id(run)}
    for section, key, value in changes:
        other = copy.deepcopy(run)
        other[section][key] = value
        rid = run_id(resolve_run(other))
        assert rid not in seen, (section, key)
        seen.add(rid)
    other = copy.deepcopy(run)
    other["seed"] = 1
    assert run_id(resolve_run(other)).endswith("-s1")
    assert run_id(resolve_run(other)) not in seen


def test_runtime_and_paths_are_not_identity(demo):
    run = next(iter(demo.runs.values()))
    other = copy.deepcopy(run)
    other["runtime"]["device"] = "cuda:3"
    other["runtime"]["checkpoint_every"] = 1
    other["partition"]["file"] = "somewhere/else.npz"
    other["dataset"]["root"] = "/data"
    assert run_id(resolve_run(other)) == run_id(run)


def test_every_run_id_is_the_id_of_its_settings(demo):
    for rid, run in demo.runs.items():
        assert run_id(run) == rid


# ----------------------------------------------------------------------------- grid expansion


def test_every_cell_maps_to_one_run_per_seed(paper):
    assert paper.seeds == [0, 1, 2]
    for item in paper.items.values():
        for cell in item.cells:
            if item.kind in X.RUNLESS_KINDS or cell.pending or cell.quoted:
                assert cell.run_ids == []
            else:
                assert len(cell.run_ids) == len(paper.seeds)
                assert len(set(cell.run_ids)) == len(paper.seeds)
                assert all(rid in paper.runs for rid in cell.run_ids)


def test_vhl_main_tables_have_the_paper_grid(demo_whole):
    for tid, dataset in (("t1", "cifar10"), ("t2", "fmnist"), ("t4", "svhn"), ("t5", "cifar100")):
        item = demo_whole.items[f"vhl_{tid}"]
        main = [c for c in item.cells if c.grid == 0]
        assert len(main) == 4 * 4 * 2  # settings × algorithms × w/, w/o VHL
        assert {c.labels["dataset"] for c in main} == {dataset}
        cells = {labels_of(c, "setting", "algorithm", "method"): c for c in main}
        assert len(cells) == len(main)
        central = [c for c in item.cells if c.grid == 1]
        assert [c.labels["method"] for c in central] == ["base", "vhl"]
        # the VHL half stays empty until the method exists
        for c in item.cells:
            assert (c.pending is not None) == (c.labels["method"] == "vhl")
        # every baseline cell has a distinct run (16 FL + 1 centralized per dataset)
        runs = {rid for c in item.cells for rid in c.run_ids}
        assert len(runs) == 17


def test_reference_values_are_attached(demo):
    t1 = {
        labels_of(c, "setting", "algorithm", "method"): c
        for c in demo.items["vhl_t1"].cells
        if c.grid == 0
    }
    assert t1[("a01-e1-k10", "fedavg", "base")].reference == {
        "acc": 79.98,
        "rounds": 287,
        "speedup": 1.0,
    }
    assert t1[("a005-e1-k10", "scaffold", "vhl")].reference["rounds"] == "Nan"
    central = [c for c in demo.items["vhl_t1"].cells if c.grid == 1]
    assert [c.reference for c in central] == [{"acc": 92.53}, {"acc": 92.88}]
    t1i = {
        labels_of(c, "dataset", "setting", "algorithm"): c
        for c in demo.items["fedimpro_t1"].cells
        if c.grid == 0
    }
    assert t1i[("cifar10", "a005-e1-k10", "scaffold")].reference == {"acc": [33.6, 3.87]}


def test_shared_cells_share_runs(demo_whole):
    """FedImpro Table 6 prints VHL's w/o-VHL numbers: the very same runs."""
    vhl = {}
    for tid in ("t1", "t2", "t4", "t5"):
        for c in demo_whole.items[f"vhl_{tid}"].cells:
            if c.grid == 0 and c.labels["method"] == "base":
                vhl[labels_of(c, "dataset", "setting", "algorithm")] = c.run_ids
    t6 = demo_whole.items["fedimpro_t6"]
    assert len(t6.cells) == 64
    for c in t6.cells:
        assert c.run_ids == vhl[labels_of(c, "dataset", "setting", "algorithm")]
    # FedImpro's centralized accuracies are VHL's centralized (w/o VHL) runs too
    vhl_central = {
        c.labels["dataset"]: c.run_ids
        for tid in ("t1", "t2", "t4", "t5")
        for c in demo_whole.items[f"vhl_{tid}"].cells
        if c.grid == 1 and c.labels["method"] == "base"
    }
    for c in demo_whole.items["fedimpro_t1"].cells:
        if c.grid == 1:
            assert c.run_ids == vhl_central[c.labels["dataset"]]


def test_fedimpro_main_runs_differ_from_vhl_runs(demo_whole):
    """Tables 1-2 of FedImpro use lr 0.1, no momentum, no decay: other runs than VHL's."""
    vhl_runs = {
        rid for tid in ("t1", "t2", "t4", "t5") for rid in demo_whole.items[f"vhl_{tid}"].run_ids()
    }
    main = [c for c in demo_whole.items["fedimpro_t1"].cells if c.grid == 0 and not c.pending]
    assert len(main) == 4 * 4 * 5  # FedImpro itself is pending
    for c in main:
        assert not set(c.run_ids) & vhl_runs
        t = c.settings["training"]
        assert t["momentum"] == 0.0 and t["lr_decay"] == 1.0
    # Table 2 is computed from exactly Table 1's runs
    assert set(demo_whole.items["fedimpro_t2"].run_ids()) <= set(demo_whole.items["fedimpro_t1"].run_ids())


def test_a_run_needed_by_several_tables_appears_once(demo):
    all_cell_runs = [rid for item in demo.items.values() for c in item.cells for rid in c.run_ids]
    assert len(set(all_cell_runs)) == len(demo.runs) < len(all_cell_runs)


def test_per_cell_learning_rates_follow_the_papers_tables(paper):
    lr = {}
    for c in paper.items["vhl_t9"].cells:
        lr[labels_of(c, "dataset", "setting", "method", "algorithm")] = c.values["lr"]
    # VHL Table 9, a few cells that differ from the default 0.01
    assert lr[("cifar10", "a005-e1-k10", "base", "scaffold")] == 0.001
    assert lr[("cifar10", "a01-e1-k100", "base", "scaffold")] == 0.0001
    assert lr[("fmnist", "a005-e1-k10", "base", "fednova")] == 0.0001
    assert lr[("fmnist", "a005-e1-k10", "vhl", "fednova")] == 0.001
    assert lr[("svhn", "a005-e1-k10", "vhl", "scaffold")] == 0.01
    assert lr[("svhn", "a01-e1-k100", "base", "fedavg")] == 0.001
    assert sum(v != 0.01 for v in lr.values()) == 31  # counted in the paper's Table 9
    lr5 = {
        labels_of(c, "dataset", "setting", "algorithm"): c.values["lr"]
        for c in paper.items["fedimpro_t5"].cells
    }
    assert lr5[("fmnist", "a005-e1-k10", "scaffold")] == 0.001
    assert lr5[("svhn", "a01-e5-k10", "fedprox")] == 0.01
    assert lr5[("cifar10", "a01-e1-k10", "fedavg")] == 0.1


def test_paper_scale_keeps_the_papers_settings(paper):
    cells = {
        labels_of(c, "setting", "algorithm", "method"): c
        for c in paper.items["vhl_t5"].cells
        if c.grid == 0
    }
    run = cells[("a01-e5-k10", "fedprox", "base")].settings
    assert run["dataset"]["name"] == "cifar100" and run["dataset"]["options"] == {}
    assert run["model"]["name"] == "resnet50" and run["model"]["width"] == 1.0
    assert run["training"]["rounds"] == 400 and run["training"]["local_epochs"] == 5
    assert run["training"]["lr_decay"] == 0.992 and run["training"]["momentum"] == 0.9
    assert run["algorithm"] == {"name": "fedprox", "params": {"mu": 1.0}}
    k100 = cells[("a01-e1-k100", "fedavg", "base")].settings
    assert k100["partition"]["num_clients"] == 100
    assert k100["training"]["clients_per_round"] == 10 and k100["training"]["rounds"] == 1000


def test_demo_scale_maps_onto_stand_ins(demo):
    for run in demo.runs.values():
        assert run["dataset"]["name"] in names.standin_datasets()
        assert run["dataset"]["options"]["stands_in_for"] in {
            "cifar10",
            "fmnist",
            "svhn",
            "cifar100",
            "cinic10",
            "femnist",
            "mnist",
            "pacs",
            "digits5",
            "cifar10c_clients",
            "retina",
        }
        assert run["training"]["rounds"] <= 100
    # FedImpro's long training (Fig. 8a, 10,000 paper rounds) is capped by the scale's max
    assert sum(run["training"]["rounds"] > 30 for run in demo.runs.values()) == 2
    assert len(demo.runs) <= 320  # the demo DAG stays small (CCVR: 30 runs, FedLGD: 85)


def test_apply_scale_rounds_and_decay():
    scale = {"rounds": {"factor": 0.1, "min": 5, "rescale_lr_decay": True}}
    run = {"training": {"rounds": 1000, "lr_decay": 0.992}}
    out = X.apply_scale(run, scale, "x")
    assert out["training"]["rounds"] == 100
    assert math.isclose(out["training"]["lr_decay"] ** 100, 0.992**1000, rel_tol=1e-4)
    assert X.apply_scale({"training": {"rounds": 20}}, scale, "x")["training"]["rounds"] == 5


def test_partitions_are_shared_across_methods(demo):
    """Every method of a setting trains on the same partition file."""
    by_setting: dict = {}
    for c in demo.items["vhl_t1"].cells:
        if c.grid == 0 and c.run_ids:
            key = demo.run_partition[c.run_ids[0]]
            by_setting.setdefault(c.labels["setting"], set()).add(key)
    assert all(len(keys) == 1 for keys in by_setting.values())
    # E=1 and E=5 (α=0.1, K=10) split the data the same way: 3 partitions for 4 settings
    assert len({k for keys in by_setting.values() for k in keys}) == 3


def test_expansion_is_torch_free():
    """Expanding the paper scale, as the Snakefile does at every `snakemake` call, imports no
    torch (its time is printed by ci/cpu-bench.py)."""
    code = (
        "import sys, yaml\n"
        "from fedhet.experiments import load_experiment\n"
        f"cfg = yaml.safe_load(open({str(ROOT / 'config' / 'config.yaml')!r}))\n"
        "cfg['scale'] = 'paper'\n"
        "cfg['skip_plugins'] = ['vhl', 'fedimpro']\n"
        f"e = load_experiment(cfg, {str(ROOT)!r})\n"
        "assert 'torch' not in sys.modules, 'experiments imported torch'\n"
        "print(len(e.runs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 300


def test_ci_selection(demo):
    items, runs = X.ci_selection(demo, base_config()["ci"])
    assert "vhl_t8" in items
    algos = {demo.runs[r]["algorithm"]["name"] for r in runs}
    assert "feddyn" in algos
    with pytest.raises(X.ExperimentError, match="valid"):
        X.ci_selection(demo, {"targets": ["vhl_t99"]})


# ----------------------------------------------------------------------------- config errors


@pytest.fixture()
def tree(tmp_path):
    """A writable copy of config/ to break."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


def edit(path: Path, func) -> None:
    data = yaml.safe_load(path.read_text())
    func(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (
            lambda d: d["protocols"]["baseline"]["values"]["algorithm"]["fedavg"]["set"][
                "algorithm"
            ].update(name="fedavgx"),
            r"unknown algorithm 'fedavgx'; valid: .*fedavg",
        ),
        (
            lambda d: d["tables"]["t1"]["grids"][0]["axes"].update(algorithm=["fedavg", "fedprxo"]),
            r"vhl\.yaml: 'tables\.t1\.grids\[0\]\.axes\.algorithm': unknown algorithm 'fedprxo'",
        ),
        (
            lambda d: d["tables"]["t1"].update(protocol="nope"),
            r"vhl\.yaml: 'protocols\.nope': unknown protocol; valid: ablation, baseline, feddf, partitions",
        ),
        (
            lambda d: d["protocols"]["baseline"]["lookups"][0]["values"]["cifar10"].update(
                {"a01-e1-k11": {}}
            ),
            r"unknown setting 'a01-e1-k11'",
        ),
        (
            lambda d: d["protocols"]["baseline"]["settings"]["training"].update(lrr=0.1),
            r"unknown setting 'training\.lrr'",
        ),
        (
            lambda d: d["protocols"]["baseline"]["values"]["dataset"]["cifar10"]["set"][
                "model"
            ].update(name="resnet19"),
            r"cell .*unknown model 'resnet19' at 'model\.name'; valid: .*resnet18",
        ),
    ],
)
def test_paper_config_errors_name_file_key_and_valid_names(tree, mutate, match):
    edit(tree / "config" / "papers" / "vhl.yaml", mutate)
    with pytest.raises(X.ExperimentError, match=match):
        X.load_experiment(base_config(), tree)


def test_unknown_scale_and_paper_list_valid_names(tree):
    with pytest.raises(X.ExperimentError, match=r"unknown scale 'huge'; valid: demo, paper, small"):
        X.load_experiment(base_config(scale="huge"), tree)
    with pytest.raises(X.ExperimentError, match=r"unknown paper 'vhll'; valid: vhl, fedlgd"):
        X.load_experiment(base_config(papers=["vhll"]), tree)
    edit(
        tree / "config" / "scales" / "demo.yaml",
        lambda d: d["datasets"]["cifar10"].update(name="digits11"),
    )
    with pytest.raises(
        X.ExperimentError, match=r"demo\.yaml: 'datasets\.cifar10': unknown dataset"
    ):
        X.load_experiment(base_config(), tree)


def test_claims_must_name_existing_tables(tree):
    edit(
        tree / "config" / "papers" / "vhl.yaml",
        lambda d: d["claims"][0]["better"].update(table="t7"),
    )
    with pytest.raises(X.ExperimentError, match=r"claims\[0\]\.better\.table.*valid: t1"):
        X.load_experiment(base_config(), tree)


def test_scale_can_force_plugin_params():
    scale = {"plugins": {"vhl": {"virtual_per_class": 20}}}
    run = {"training": {"rounds": 10}, "plugins": [{"name": "vhl", "params": {"a": 1}}]}
    out = X.apply_scale(run, scale, "x")
    assert out["plugins"] == [{"name": "vhl", "params": {"a": 1, "virtual_per_class": 20}}]
    assert run["plugins"][0]["params"] == {"a": 1}  # the input is not modified


def demo_training_samples(run: dict) -> float:
    """Images a demo run's clients train on in all (rounds × clients × local samples): the
    work that dominates a demo job (its start-up and evaluation are about a fifth)."""
    from fedhet.data import describe

    t, o = run["training"], describe(run["dataset"]["name"], run["dataset"]["options"])["options"]
    classes = describe(run["dataset"]["name"], o)["num_classes"]
    virtual = [p["params"] for p in run.get("plugins") or [] if "ipc" in (p.get("params") or {})]
    if virtual:  # FedLGD's clients train on IPC virtual images per class (and the global ones)
        p = virtual[0]
        per_client = p["ipc"] * classes + p["server_ipc"] * classes * p.get("ce_on_global", 0)
        return t["rounds"] * t["clients_per_round"] * t["local_epochs"] * per_client
    if "writers" in o:
        size = o["writers"] * o["train_per_writer"]
    else:
        styles = len(o["domains"] or range(5)) if "domains" in o else 1
        size = o["train_per_class"] * styles * classes
    if t["centralized"]:
        return t["rounds"] * t["local_epochs"] * size
    if t["local_steps"]:
        return t["rounds"] * t["clients_per_round"] * t["local_steps"] * t["batch_size"]
    return t["rounds"] * t["clients_per_round"] * t["local_epochs"] * size / run["partition"][
        "num_clients"]


DISTILLATION_CAP = 2.3e6  # 2.18 M on 2026-11-25: FedLGD's 11 artefacts and 40 runs


def distillation_passes(exp) -> float:
    """Images FedLGD's distillation embeds in all: each artefact's warm-up (steps × clients ×
    classes × (real batch + IPC)) and each run's iterative distribution matching and server
    gradient matching (the demo's artefacts took 88 s of CPU in all)."""
    from fedhet.data import describe

    total = 0.0
    for art in exp.artefacts.values():
        if art["family"] != "distilled":
            continue
        s, p = art["settings"], art["settings"]["params"]
        classes = describe(s["dataset"]["name"], s["dataset"]["options"])["num_classes"]
        total += (p["warmup_steps"] * s["partition"]["num_clients"] * classes
                  * (p["real_batch"] + p["ipc"]))
    for run in exp.runs.values():
        for p in (q["params"] for q in run.get("plugins") or [] if q["name"] == "fedlgd"):
            classes = describe(run["dataset"]["name"], run["dataset"]["options"])["num_classes"]
            rounds = min(p["distill_times"], max(0, (run["training"]["rounds"] - 1)
                                                 // p["distill_every"]))
            total += (rounds * p["local_steps"] * run["training"]["clients_per_round"] * classes
                      * (p["real_batch"] + p["ipc"]))
            total += (rounds + 1) * p["server_steps"] * p["server_ipc"] * classes
    return total


def test_the_whole_demo_stays_within_its_budget():
    """The README's main command (every configured paper at the demo scale) must stay within 30
    minutes on 2 cores. Measured on 2026-11-25 at 463 training runs: see the README. These caps
    keep the quantities that set its time from growing unnoticed: the number of training jobs
    (each costs about 0.5 s to start even through the fork server), the images they train on
    (13.7 M, about 0.2 ms each for the demo's quarter-width ConvNet on one core) and the images
    FedLGD's distillation embeds (its artefacts' warm-up and its rounds' matching)."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    exp = X.load_experiment({**cfg, "scale": "demo"}, ROOT)
    samples = sum(demo_training_samples(run) for run in exp.runs.values())
    assert len(exp.runs) <= 470, len(exp.runs)
    assert samples <= 13.8e6, f"{samples / 1e6:.2f} M images"
    passes = distillation_passes(exp)
    assert passes <= DISTILLATION_CAP, f"{passes / 1e6:.2f} M images"
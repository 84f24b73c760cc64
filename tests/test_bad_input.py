"""Malformed input never reaches training: exit code 2, one line naming the problem, no
traceback, nothing written under --out; and nothing read from disk can run code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fedhet import atomic
from fedhet.cli import main
from fedhet.config import resolve_run, run_id
from fedhet.declare import ConfigError, Param

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "dataset": {"name": "digits10", "options": {"train_per_class": 12, "test_per_class": 3}},
    "model": {"name": "cnn4", "width": 0.25},
    "partition": {"num_clients": 2, "min_size": 2},
    "training": {"rounds": 1, "clients_per_round": 2},
    "runtime": {"device": "cpu"},
}


def with_(path: str, value) -> dict:
    """TINY with one dotted setting replaced."""
    run = json.loads(json.dumps(TINY))
    *parents, leaf = path.split(".")
    node = run
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return run


# (run settings, what the message must say)
BAD_RUNS = [
    (with_("training.lr", "fast"), r"training\.lr' is 'fast'; allowed: a number > 0"),
    (with_("training.lr", -0.1), r"training\.lr"),
    (with_("training.lr", ".inf"), r"training\.lr"),
    (with_("eval.every", "x"), r"eval\.every' is 'x'"),
    (with_("seed", "abc"), r"'seed' is 'abc'; allowed: an integer >= 0"),
    (with_("seed", -1), r"'seed'"),
    (with_("training.momentum", "high"), r"training\.momentum"),
    (with_("training.momentum", -0.5), r"training\.momentum.*>= 0 and < 1"),
    (with_("training.weight_decay", "abc"), r"training\.weight_decay"),
    (with_("training.local_steps", -3), r"training\.local_steps' is -3"),
    (with_("training.local_epochs", 0), r"training\.local_epochs' is 0"),
    (with_("training.lr_decay", -1), r"training\.lr_decay"),
    (with_("training.rounds", 0), r"training\.rounds' is 0"),
    (with_("training.rounds", True), r"training\.rounds' is True"),
    (with_("training.batch_size", 2.5), r"training\.batch_size' is 2\.5"),
    (with_("training.augment", "flip"), r"training\.augment.*one of auto, none"),
    (with_("training.max_grad_norm", 0), r"training\.max_grad_norm"),
    (with_("training.clients_per_round", 5), r"clients_per_round \(5\) exceeds"),
    (with_("partition.num_clients", 0), r"partition\.num_clients' is 0"),
    (with_("partition.alpha", 0), r"partition\.alpha' is 0; allowed: a number > 0"),
    (with_("partition.scheme", "zipf"), r"unknown partition 'zipf'.*valid: .*dirichlet"),
    (with_("model.width", -1), r"model\.width"),
    (with_("model.name", "resnet1000"), r"unknown model 'resnet1000'.*valid: .*resnet18"),
    (with_("dataset.name", "imagenet"), r"unknown dataset 'imagenet'.*valid: .*cifar10"),
    (with_("algorithm.name", "fedsgd"), r"unknown algorithm 'fedsgd'.*valid: .*fedavg"),
    ({**TINY, "algorithm": {"name": "fedprox", "params": {"mu": "x"}}},
     r"algorithm\.params\(fedprox\)\.mu' is 'x'"),
    ({**TINY, "algorithm": {"name": "fedprox", "params": {"nu": 1}}},
     r"unknown setting 'algorithm\.params\(fedprox\)\.nu'; valid keys here: mu"),
    ({**TINY, "algorithm": {"name": "scaffold", "params": {"model_average": "median"}}},
     r"model_average' is 'median'; allowed: one of samples, mean"),
    ({**TINY, "plugins": [{"name": "vhl", "params": {"virtual_per_class": -1}}]},
     r"plugins\[0\]\.params\(vhl\)\.virtual_per_class' is -1"),
    ({**TINY, "plugins": [{"name": "vhl", "params": {"variant": "vhl2"}}]},
     r"variant' is 'vhl2'; allowed: one of vhl, naive, vfa, vftl"),
    ({**TINY, "plugins": "vhl"}, r"'plugins' is 'vhl'; allowed: a list"),
    ({**TINY, "plugins": [{"nam": "vhl"}]}, r"plugins\[0\] must be a mapping with a 'name'"),
    ({**TINY, "training": 5}, r"setting 'training' must be a mapping"),
    ({**TINY, "trainin": {}}, r"unknown setting 'trainin'"),
    (with_("runtime.device", "gpu"), r"runtime\.device' is 'gpu'"),
    (with_("runtime.snapshot_rounds", [0]), r"snapshot_rounds' is \[0\]; allowed: a list of "
     r"integers \(each >= 1\)"),
    (with_("runtime.threads", 0), r"runtime\.threads' is 0"),
    (with_("model.options", {"foo": 1}), r"model\.options.*unknown option\(s\) foo"),
]


def expect_clean_failure(argv: list[str], message: str, capsys, out: Path | None) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f"fedhet {argv[0]}: error:") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())
    return err


@pytest.mark.parametrize("run, message", BAD_RUNS)
def test_bad_run_settings_stop_before_anything_is_written(run, message, tmp_path, capsys,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    out = tmp_path / "out"
    expect_clean_failure(["train", "--config", str(config), "--out", str(out)], message, capsys,
                         out)


@pytest.mark.parametrize("sets, message", [
    (["training.lr=fast"], r"training\.lr' is 'fast'"),
    (["training.lr=["], r"--set training\.lr: value '\[' is not valid YAML"),
    (["plugins.3.name=vhl"], r"not an index of the 0-item list at 'plugins'"),
    (["training.rounds"], r"--set expects KEY=VALUE"),
    (["training.rounds.x=1"], r"--set training\.rounds\.x: 'training\.rounds' is not a mapping"),
])
def test_bad_set_values(sets, message, tmp_path, capsys):
    argv = ["train", "--config-json", json.dumps({**TINY, "plugins": []})]
    for s in sets:
        argv += ["--set", s]
    out = tmp_path / "out"
    expect_clean_failure([*argv, "--out", str(out)], message, capsys, out)


@pytest.mark.parametrize("text, message", [
    ("training: {lr: 0.1\nseed: 0\n", r"run\.yaml: not valid YAML: .*line"),
    ("- 1\n- 2\n", r"run\.yaml: expected a mapping at the top level"),
])
def test_malformed_yaml_files(text, message, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    expect_clean_failure(["train", "--config", str(config), "--out", str(out)], message, capsys,
                         out)


def test_missing_config_file(tmp_path, capsys):
    expect_clean_failure(["run-id", "--config", str(tmp_path / "nope.yaml")], "nope.yaml",
                         capsys, None)


class _CreatesAFile:
    """Unpickling this object opens (creates) a file: code execution if the loader allows it."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))


def test_a_tampered_checkpoint_runs_no_code(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save({"run_hash": _CreatesAFile(marker)}, ckpt / "checkpoint.pt")
    out = tmp_path / "out"
    err = expect_clean_failure(
        ["train", "--config-json", json.dumps(TINY), "--out", str(out), "--ckpt-dir", str(ckpt)],
        r"checkpoint\.pt cannot be read as a checkpoint .*delete it", capsys, out,
    )
    assert not marker.exists(), err


def test_a_corrupt_partition_file_is_named_with_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "part.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip archive")
    out = tmp_path / "out"
    expect_clean_failure(
        ["train", "--config-json", json.dumps(with_("partition.file", str(bad))), "--out",
         str(out)],
        r"part\.npz is not a readable partition file .*delete it", capsys, out,
    )


def test_prepare_data_verifies_what_it_reports(tmp_path, capsys):
    root = tmp_path / "data"
    options = '{"train_per_class": 5, "test_per_class": 2}'
    argv = ["prepare-data", "--dataset", "digits10", "--root", str(root), "--options", options]
    assert main(argv) == 0
    said = capsys.readouterr()
    path = Path(said.out.strip())
    assert f"{path} (sha256 " in said.err and "verified" in said.err  # the job's log line
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    err = expect_clean_failure(argv, r"is corrupt: its sha256", capsys, None)
    assert f"--root {root}" in err and '"train_per_class": 5' in err  # the hint rebuilds it there


def test_numbers_written_in_yaml_exponent_form_are_numbers():
    """YAML 1.1 reads `1e-3` as a string; the setting's declared kind makes it a number."""
    text = yaml.safe_load("training: {lr: 1e-3, rounds: 1e1}\nalgorithm: {name: fedprox, "
                          "params: {mu: 1E-2}}")
    assert text["training"]["lr"] == "1e-3"  # what YAML gives
    run = resolve_run(text)
    assert run["training"]["lr"] == 0.001 and run["training"]["rounds"] == 10
    assert run["algorithm"]["params"]["mu"] == 0.01
    same = {"training": {"lr": 0.001, "rounds": 10}, "algorithm": {"name": "fedprox",
                                                                  "params": {"mu": 0.01}}}
    assert run_id(run) == run_id(resolve_run(same))


def test_param_check_against_its_declaration():
    p = Param(0.5, "a fraction", at_least=0, below=1)
    assert p.check(0, "x") == 0 and isinstance(p.check(0, "x"), int)  # ints stay ints (run ids)
    for bad in (1, -0.1, "0.5x", True, None, float("nan")):
        with pytest.raises(ConfigError, match="setting 'x'"):
            p.check(bad, "x")
    assert Param(None, "optional count", kind="int", at_least=1).check(None, "n") is None
    assert Param(3, "count").check(4.0, "n") == 4


def test_a_killed_write_leaves_nothing_after_the_next_write(tmp_path):
    target = tmp_path / "model.pt"
    code = ("import os, sys\nfrom fedhet import atomic\n"
            "atomic.write_with(sys.argv[1], lambda fh: (fh.write(b'half'), os._exit(9)))")
    subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert [p.name for p in tmp_path.iterdir()][0].startswith(".model.pt.")  # left behind
    atomic.write_text(target, "whole")
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]
    assert target.read_text() == "whole"


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    """Another process writing the same path right now keeps its temporary file."""
    live = tmp_path / f".model.pt.{atomic._HOST}.{__import__('os').getpid()}.abc123.tmp"
    live.write_text("in progress")
    atomic.write_text(tmp_path / "model.pt", "x")
    assert live.exists()


# -- paper configs: a typo stops `snakemake -n` before any job, naming file, key and labels --

def _workflow_copy(tmp_path: Path) -> Path:
    from test_workflow import copy_workflow

    dest = tmp_path / "wf"
    dest.mkdir()
    copy_workflow(dest)
    return dest


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, message", [
    # a setting label typo inside Table 1's reference block (24 paper numbers)
    ("        reference:\n          a01-e1-k10:\n", "        reference:\n          a01-e1-k1O:\n",
     r"tables\.t1\.grids\[0\]\.reference\.a01-e1-k1O.*not a label of axis setting; valid: "
     r"a01-e1-k10, a005-e1-k10"),
    # an algorithm typo one level down
    ("            fedavg: { vhl: { acc: 87.82", "            fedavgg: { vhl: { acc: 87.82",
     r"reference\.a01-e1-k10\.fedavgg.*not a label of axis algorithm; valid: fedavg, fedprox"),
    # a metric typo at the leaf
    ("{ vhl: { acc: 87.82, rounds: 128", "{ vhl: { acc: 87.82, round: 128",
     r"reference\.a01-e1-k10\.fedavg\.vhl\.round.*unknown metric 'round'; valid here: acc"),
])
def test_paper_config_typos_stop_the_dry_run(old, new, message, tmp_path):
    wf = _workflow_copy(tmp_path)
    _edit(wf / "config" / "papers" / "vhl.yaml", old, new)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules"],
        cwd=wf, capture_output=True, text=True, check=False,
    )
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert re.search(r"config/papers/vhl\.yaml", said), said
    assert re.search(message, said), said
    assert not (wf / "results").exists() and not (wf / "resources").exists()

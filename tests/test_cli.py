"""The command line: subcommands exist, bad input is one clear line with exit code 2."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fedhet.cli import build_parser, main
from fedhet.engine.flat import FlatModel
from fedhet.models import build_model


def test_every_subcommand_has_help(capsys):
    for command in ("train", "run-id", "prepare-data", "datasets", "seed-fmnist", "partition",
                    "evaluate", "bench", "gpu-check", "methods"):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([command, "--help"])
        assert exit_.value.code == 0
        assert "usage: fedhet " + command in capsys.readouterr().out


def test_the_fork_servers_command_works_but_is_not_offered(tmp_path, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    listing = capsys.readouterr().out
    assert "gpu-check" in listing and "run-script" not in listing
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('ran', sys.argv[0])\n")
    assert main(["run-script", str(script)]) == 0
    assert capsys.readouterr().out == f"ran {script}\n"


def test_train_then_evaluate_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = {"dataset": {"name": "digits10", "options": {"train_per_class": 20, "test_per_class": 5}},
           "model": {"name": "cnn4", "width": 0.25}, "partition": {"num_clients": 2, "min_size": 2},
           "training": {"rounds": 1, "clients_per_round": 2}}
    assert main(["train", "--config-json", json.dumps(run), "--set", "training.lr=0.02",
                 "--out", "out", "--device", "cpu"]) == 0
    final = json.loads(capsys.readouterr().out)
    assert final["status"] == "completed"
    assert main(["run-id", "--config-json", json.dumps(run), "--set", "training.lr=0.02"]) == 0
    assert capsys.readouterr().out.strip() == final["run_id"]
    assert main(["evaluate", "--run", "out", "--device", "cpu"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    logged = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[-1])
    assert evaluated["test_acc"] == pytest.approx(logged["test_acc"])


def test_set_reaches_into_lists(capsys):
    """`--set plugins.0.params.X=...` edits the first plug-in's parameter, as the YAML would."""
    def run_id_of(run, *sets):
        argv = ["run-id", "--config-json", json.dumps(run)]
        for s in sets:
            argv += ["--set", s]
        assert main(argv) == 0
        return capsys.readouterr().out.strip()

    plugin = {"name": "vhl", "params": {"calibration_weight": 0.5}}
    edited = run_id_of({"plugins": [{"name": "vhl"}]}, "plugins.0.params.calibration_weight=0.5")
    assert edited == run_id_of({"plugins": [plugin]})
    assert edited != run_id_of({"plugins": [{"name": "vhl"}]})


@pytest.mark.parametrize("argv, message", [
    (["run-id", "--config-json", '{"trainin": {}}'], "unknown setting 'trainin'"),
    (["run-id", "--config-json", '{"model": {"name": "cnn4"}}', "--set", "training.rounds=0"],
     "training.rounds' is 0; allowed: an integer >= 1"),
    (["run-id", "--config-json", '{"plugins": []}', "--set", "plugins.0.name=vhl"],
     "not an index of the 0-item list at 'plugins'"),
    (["run-id", "--config-json", '{"model": {"name": "cnn4"}}', "--set", "runtime.checkpoint_every=0"],
     "runtime.checkpoint_every' is 0"),
    (["prepare-data", "--dataset", "cifar10", "--root", "{tmp}"], "--download"),
    (["prepare-data", "--dataset", "imagenet22k"], "valid: .*cifar10"),
    (["evaluate", "--run", "{tmp}"], "resolved.yaml"),
    # the defaults alone are no run to train: point to one that learns
    (["train", "--out", "{tmp}/run"], "no run settings given: .*examples/run.yaml"),
    (["train", "--set", "training.rounds=2", "--out", "{tmp}/run"], "no run settings given"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, message, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedhet {argv[0]}: error:") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_channels_last_views_keep_the_model_working():
    torch.manual_seed(0)
    model = build_model("resnet10", 10, 3, 16, 0.125)
    x = torch.randn(2, 3, 16, 16)
    expected = model.eval()(x)
    flat = FlatModel(model, channels_last=True)
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(model(x.contiguous(memory_format=torch.channels_last)), expected, atol=1e-5)
    flat.params.mul_(0)
    assert float(conv.weight.detach().abs().sum()) == 0.0


def test_the_readme_example_run_file_resolves():
    """The file the README's first `fedhet train` command reads exists and is a valid run."""
    from pathlib import Path

    from fedhet.config import load_yaml, resolve_run

    root = Path(__file__).resolve().parents[1]
    assert "--config examples/run.yaml" in (root / "README.md").read_text()
    run = resolve_run(load_yaml(str(root / "examples" / "run.yaml")))
    assert run["dataset"]["name"] == "digits10" and run["training"]["rounds"] == 20

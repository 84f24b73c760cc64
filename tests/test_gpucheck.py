"""The GPU check's pieces that run anywhere: its results file and summary, the paper round's
modes, reference loop and records (tiny, on the CPU), the CUDA-test part's report, and the
look-up of the real-data run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedhet.cost.throughput import DEFAULT_THROUGHPUT
from fedhet.bench import paper_round
from fedhet.bench.gpucheck import parts
from fedhet.bench.gpucheck.check import CPU_BUDGET, GPU_BUDGET, Budget, run_part, why_failed
from fedhet.bench.gpucheck.records import (
    FIELDS,
    append_record,
    make_record,
    read_records,
    summary,
)
from fedhet.bench.paper_round import (
    RoundSize,
    average_state_dicts,
    bench_modes,
    client_indices,
)
from fedhet.cli import main as cli_main
from fedhet.data.fmnist import DEBIAN_FMNIST_DIR
from fedhet.engine.modes import Mode


ROOT = Path(__file__).resolve().parents[1]


def _record(what="paper round: engine", ok=True, **figures):
    return make_record(what, "bf16", "NVIDIA H100", "2.11.0", ok=ok, **figures)


def test_a_record_turns_seconds_into_rates():
    r = _record(seconds=2.0, images=25_000, flops_per_image=3.33e9, peak_mem_bytes=3 * 2**30)
    assert list(r) == list(FIELDS)
    assert r["img_per_s"] == 12_500
    assert r["tflops"] == pytest.approx(12_500 * 3.33e9 / 1e12)
    assert r["peak_mem_gib"] == 3.0
    bare = _record(ok=False, note="boom")
    assert [bare[f] for f in ("s_per_round", "img_per_s", "tflops", "peak_mem_gib")] == [None] * 4


def test_records_are_appended_one_by_one_and_summarised(tmp_path):
    path = tmp_path / "gpu-check.json"
    assert read_records(path) == []
    first = _record(seconds=1.5, images=3000, flops_per_image=1e9, note="stacked",
                    model="resnet18")
    append_record(path, first)
    assert json.loads(path.read_text()) == [first]  # complete after each record
    append_record(path, _record("pytest -m gpu", ok=False, note="1 failed, 3 passed"))
    records = read_records(path)
    assert [r["what"] for r in records] == ["paper round: engine", "pytest -m gpu"]
    assert not list(tmp_path.glob(".*.tmp"))  # written through a renamed temporary file
    table = summary(records)
    assert "device NVIDIA H100 | torch 2.11.0" in table
    assert "2,000" in table and "1.500" in table  # images/s, s/round
    assert table.splitlines()[2].split()[3:5] == ["bf16", "resnet18"]  # mode, model
    assert "NO" in table and "1 failed, 3 passed" in table
    assert table.splitlines()[-1] == "2 measurements, 1 failed"


def test_bad_records_and_files_are_refused_without_touching_the_file(tmp_path):
    path = tmp_path / "gpu-check.json"
    append_record(path, _record())
    before = path.read_text()
    with pytest.raises(ValueError, match="missing fields \\['note'\\]"):
        append_record(path, {k: v for k, v in _record().items() if k != "note"})
    with pytest.raises(ValueError, match="s_per_round must be a finite number"):
        append_record(path, {**_record(), "s_per_round": math.nan})
    with pytest.raises(ValueError, match="model must be a model's name or null"):
        append_record(path, {**_record(), "model": 18})
    with pytest.raises(ValueError, match="ok must be true or false"):
        append_record(path, {**_record(), "ok": "yes"})
    assert path.read_text() == before
    other = tmp_path / "other.json"
    other.write_text('{"records": []}')
    with pytest.raises(ValueError, match="not a GPU-check results file"):
        append_record(other, _record())


def test_modes_parse_and_map_to_run_settings():
    mode = Mode.parse("bf16+channels_last")
    assert (mode.precision, mode.channels_last, mode.name) == ("bf16", True, "bf16+channels_last")
    assert Mode.of_runtime(mode.runtime()) == mode
    assert Mode.parse("fp32").name == "fp32"
    fast = Mode.parse("bf16+cudnn_benchmark+channels_last")
    assert (fast.channels_last, fast.cudnn_benchmark) == (True, True)
    assert fast.name == "bf16+channels_last+cudnn_benchmark"
    assert fast.runtime()["cudnn_benchmark"] and Mode.of_runtime(fast.runtime()) == fast
    assert not Mode.parse("bf16").runtime()["cudnn_benchmark"]
    for bad in ("fp16", "bf16+channels_last+channels_last", "channels_last", "tf32+turbo",
                "bf16+channels_last=yes", "bf16+"):
        with pytest.raises(ValueError, match="unknown mode"):
            Mode.parse(bad)


def test_the_warm_up_sees_every_batch_shape_of_the_round():
    size = RoundSize(images=5000, batch_size=128)
    assert size.warmup_images == 2 * 128 + 8  # 5000 = 39 x 128 + 8
    assert RoundSize(images=100, batch_size=128).warmup_images == 100
    idx = client_indices(size, 264)
    assert [int(i[0]) for i in idx] == [0, 5000, 10000, 15000, 20000]
    assert all(len(i) == 264 for i in idx)


def test_the_reference_averages_state_dicts_entry_by_entry():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(4)}
    avg = average_state_dicts([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0]))
    assert avg["n"].dtype == torch.int64 and int(avg["n"]) == 3  # 3.5, cast back


def test_the_round_bench_records_every_variant(tmp_path, monkeypatch, one_thread):
    """A tiny round on the CPU: each variant trains 2 clients x 4 images and is recorded, the
    reference with the others' speed relative to it; a failing variant is recorded as such."""
    size = RoundSize(clients=2, images=4, batch_size=4, model="cnn4", width=0.25)
    path = tmp_path / "gpu-check.json"
    records = bench_modes(size, [Mode("default")], ["engine", "eager", "stacked", "reference"],
                          torch.device("cpu"), records=str(path), echo=lambda _: None)
    assert read_records(path) == records
    assert [r["what"] for r in records] == [
        "paper round: engine, clients one at a time",
        "paper round: engine, clients one at a time, eager (no CUDA graphs)",
        "paper round: engine, stacked clients", "paper round: reference loop"]
    for r in records:
        assert r["ok"] and r["mode"] == "default" and r["peak_mem_gib"] is None
        assert r["img_per_s"] == pytest.approx(8 / r["s_per_round"])
    assert "stacked" in records[2]["note"]
    assert "engine" in records[3]["note"] and "x its speed" in records[3]["note"]
    with pytest.raises(ValueError, match="unknown variant"):
        bench_modes(size, [Mode("default")], ["compiled"], torch.device("cpu"))
    # --profile: one more round of each variant under torch.profiler, its table in a file
    profiled = bench_modes(size, [Mode("default", channels_last=True)], ["engine"],
                           torch.device("cpu"), profile_dir=str(tmp_path / "prof"),
                           echo=lambda _: None)
    text = (tmp_path / "prof" / "engine-default_channels_last.txt").read_text()
    assert text.startswith("profiled round ") and "CPU busy" in text.splitlines()[0]
    assert "Self CPU" in text and "aten::" in text  # torch's operator table
    assert "CPU busy" in profiled[0]["note"] and profiled[0]["ok"]
    assert [p.name for p in (tmp_path / "prof").iterdir()] == ["engine-default_channels_last.txt"]
    # where the engine would not stack the clients (bf16), the stacked variant is not timed
    said: list[str] = []
    records = bench_modes(size, [Mode("bf16")], ["engine", "stacked"], torch.device("cpu"),
                          echo=said.append)
    assert [r["what"] for r in records] == ["paper round: engine, clients one at a time"]
    assert any("stacked clients: not timed" in line and "bf16 autocast is not vectorised" in line
               for line in said)


    def out_of_memory(*args):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(paper_round, "reference_builder", out_of_memory)
    failed = bench_modes(size, [Mode("default"), Mode("bf16")], ["reference"],
                         torch.device("cpu"), echo=lambda _: None)
    assert [(r["mode"], r["ok"], r["note"]) for r in failed] == [
        ("default", False, "RuntimeError: CUDA out of memory"),
        ("bf16", False, "RuntimeError: CUDA out of memory")]  # the next mode still ran


def test_packed_runs_are_timed_only_while_all_of_them_train():
    """Two runs of 100-image rounds: the first ends rounds at 1, 2, ..., 6 s, the second
    (started later) at 3.5, 4.5, ..., 8.5 s. Both train from 3.5 s (the second's first round)
    to 6 s (the first's last): rounds ending in (3.5, 6] are the first's at 4, 5, 6 and the
    second's at 4.5, 5.5: 5 rounds, 500 images in 2.5 s."""
    first = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    second = [3.5, 4.5, 5.5, 6.5, 7.5, 8.5]
    assert parts.overlap_rate([first, second], 100) == (200.0, 2.5, 5)
    assert parts.overlap_rate([first], 100) == (100.0, 5.0, 5)  # one run: its rounds after the 1st
    # runs that never trained at once, or a run with a single round, give no figure
    assert parts.overlap_rate([first, [7.0, 8.0]], 100) is None
    assert parts.overlap_rate([first, [3.0]], 100) is None


def test_the_packing_measurement_runs_and_records_each_group(tmp_path):
    """`python -m fedhet.bench.gpucheck packing`, shrunk for the CPU: one run timed over its
    rounds after the first (a GPU times 1, 2 and 4 at once), of the model and batch asked for."""
    out = tmp_path / "packing.json"
    done = subprocess.run([sys.executable, "-m", "fedhet.bench.gpucheck", "packing", "--cpu",
                           "--out", str(out), "--work", str(tmp_path / "work"), "--counts", "1",
                           "--rounds", "3", "--steps", "graph", "--model", "convnet",
                           "--batch-size", "16"],
                          capture_output=True, text=True, env=parts.environment(), timeout=600)
    assert done.returncode == 0, done.stderr
    [record] = read_records(out)
    assert record["what"] == "1 run(s) sharing the device, graph-replayed steps"
    assert record["ok"] and record["model"] == "convnet" and record["img_per_s"] > 0
    assert "img/s over the" in record["note"] and "when all 1 trained (2 rounds" in record["note"]
    assert "per run 3 rounds x 2 clients x 1 steps x batch 16" in record["note"]


def test_the_tests_part_reports_pytest_s_summary_and_failures(tmp_path):
    test_file = tmp_path / "test_fake_gpu.py"
    test_file.write_text(
        "import pytest\n"
        "@pytest.mark.gpu\ndef test_passes(): pass\n"
        "@pytest.mark.gpu\ndef test_fails(): assert False\n"
        "def test_not_marked(): pass\n")
    ctx = parts.Context(tmp_path / "out.json", torch.device("cpu"), tmp_path)
    record = parts.tests(ctx, [str(test_file)])
    assert not record["ok"]
    assert "1 failed, 1 passed, 1 deselected" in record["note"]
    assert "test_fake_gpu.py::test_fails" in record["note"]
    assert parts.marked_test_files(tmp_path) == [str(test_file)]
    assert read_records(tmp_path / "out.json") == [record]


def test_the_real_data_run_is_the_small_scale_fmnist_cell():
    cell = parts.FMNIST_CELL
    rid, run = parts.cell_run(cell["target"], cell["scale"], cell["where"])
    assert run["dataset"]["name"] == "fmnist"
    assert (run["algorithm"]["name"], run["partition"]["alpha"]) == ("fedavg", 0.1)
    from fedhet.config import run_id

    assert run_id(run) == rid
    with pytest.raises(ValueError, match="0 runs match"):
        parts.cell_run(cell["target"], cell["scale"], {**cell["where"], "setting": "a9"})


def test_each_part_gets_its_own_seconds_and_what_the_earlier_ones_left():
    # on time: each part until its own deadline (118, 158, 210, 235 s), within the whole's
    # 240 s less the summary's 5
    assert [GPU_BUDGET.limit(i, at) for i, at in enumerate((0, 118, 158, 210))] == [118, 40, 52,
                                                                                  25]
    # early parts that finished sooner leave their seconds to the next
    assert GPU_BUDGET.limit(1, 20.7) == 138
    # late: never past the whole, and nothing at all once it is used up
    assert GPU_BUDGET.limit(3, 230) == 5
    assert GPU_BUDGET.limit(3, 236) == -1
    # without a whole (the CPU smoke run) each part has its own seconds, whenever it starts
    assert [CPU_BUDGET.limit(i, 1000) for i in range(4)] == [300] * 4
    assert Budget((10, 10), 0).limit(1, 500) == 10


def test_a_part_is_stopped_at_its_time_limit_its_output_kept(tmp_path, capfd):
    log = tmp_path / "part.log"
    slow = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    assert run_part(slow, 1, log, dict(os.environ), tmp_path) == 124
    assert log.read_text() == "started\n" and "started" in capfd.readouterr().out
    assert why_failed(124, 1, log) == ("time limit 1 s reached; the records before this one are "
                                       "what it measured")
    failing = [sys.executable, "-c", "print('one'); print('two'); raise SystemExit(3)"]
    assert run_part(failing, 30, log, dict(os.environ), tmp_path) == 3
    assert why_failed(3, 30, log) == "exit 3: one two"


def _cost(capsys, *args: str) -> dict:
    """`fedhet cost --scale paper --json ARGS`, its JSON."""
    assert cli_main(["cost", "--scale", "paper", "--root", str(ROOT), "--json", *args]) == 0, \
        capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_cost_of_a_scale_from_the_check_s_own_records(tmp_path, capsys):
    """`ci/gpu-check.sh --cpu` then `fedhet cost --throughput` on what it wrote: the model the
    paper round trained costs at its measured throughput, the fastest record's, or the fastest
    in the precision `--mode` names; every other model at the assumed default."""
    out = tmp_path / "gpu-check.json"
    check = subprocess.run(["bash", str(ROOT / "ci" / "gpu-check.sh"), "--cpu", "--out", str(out),
                            "--work", str(tmp_path / "work")],
                           env={**os.environ, "PYTHON": sys.executable},
                           capture_output=True, text=True, timeout=600)
    # every part passes where Fashion-MNIST is installed (CI's machine: this is its GPU check's
    # run on the CPU); 1 where it is not: the real-data run's record then says so
    fmnist = Path(os.environ.get("FEDHET_FMNIST_DIR") or DEBIAN_FMNIST_DIR)
    assert check.returncode in ((0,) if fmnist.is_dir() else (0, 1)), \
        check.stdout + check.stderr
    costs = {mode: _cost(capsys, "--throughput", str(out), *(["--mode", mode] if mode else []))
             for mode in (None, "bf16")}
    records = read_records(out)
    engine = [r for r in records if r["what"].startswith("paper round: engine")]
    assert engine and all(r["ok"] and r["model"] == "resnet18" for r in engine)
    assert [r["model"] for r in records if r["what"] == "paper round: reference loop"] == \
        [None, None]  # the reference loop's speed is not what a run costs
    assert {(r["mode"], r["model"]) for r in records if " runs " in r["what"]} == {
        ("default", "resnet18")}  # the runs one after another and sharing the device
    in_bf16 = [r for r in engine if r["mode"].startswith("bf16+")]
    for mode, picked in ((None, engine), ("bf16", in_bf16)):
        measured = costs[mode]["throughput"]["resnet18"]
        assert measured["tflops"] == max(r["tflops"] for r in picked)
        assert measured["source"].startswith("measured: gpu-check.json (paper round: engine")
        assert costs[mode]["throughput"]["convnet"]["tflops"] == DEFAULT_THROUGHPUT.tflops

"""`fedhet bench --models` (fedhet.bench.models): the model shapes of a scale, a round of each
timed and recorded, and `fedhet cost` reading those records. On the CPU, with tiny rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedhet import experiments as X
from fedhet.cost import estimate as S
from fedhet.bench import models
from fedhet.bench.gpucheck.records import read_records
from fedhet.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_shapes() -> dict[S.ModelShape, float]:
    return models.scale_shapes(ROOT, ["demo"])


def test_the_shapes_of_a_scale_cover_its_runs_and_its_training_work(demo_shapes):
    exp = X.load_experiment({"scale": "demo"}, ROOT)
    used = {rid for item in exp.items.values() for rid in item.run_ids()}
    assert {S.run_shape(exp.runs[rid]) for rid in used} == set(demo_shapes)
    assert sum(demo_shapes.values()) == pytest.approx(S.scale_cost(exp).total.train_tflop,
                                                      rel=1e-9)
    work = list(demo_shapes.values())
    assert work == sorted(work, reverse=True)  # largest share first


def test_a_round_of_a_shape_trains_that_shape(demo_shapes):
    shape = next(s for s in demo_shapes if s.options != "{}")
    size = models.round_size(shape, clients=2, batches=3)
    assert (size.model, size.width, size.channels, size.image_size, size.num_classes,
            size.batch_size, size.images, size.clients) == (
        shape.model, shape.width, shape.channels, shape.image_size, shape.num_classes,
        shape.batch_size, 3 * shape.batch_size, 2)
    assert json.loads(size.options) == json.loads(shape.options)


def test_bench_models_records_every_shape_and_cost_reads_them(tmp_path, capsys):
    out = tmp_path / "models.json"
    assert cli_main(["bench", "--models", "--scales", "demo", "--only", "cnn4", "--root",
                     str(ROOT), "--round-clients", "1", "--model-batches", "1", "--device",
                     "cpu", "--records", str(out)]) == 0
    capsys.readouterr()
    records = read_records(out)
    cnn4 = [s.key for s in models.scale_shapes(ROOT, ["demo"]) if s.model == "cnn4"]
    assert len(cnn4) > 1 and [r["shape"] for r in records] == cnn4
    assert all(r["ok"] and r["model"] == "cnn4" and r["tflops"] > 0 and r["mode"] == "default"
               for r in records)
    assert cli_main(["cost", "--scale", "demo", "--root", str(ROOT), "--json",
                     "--throughput", str(out)]) == 0
    throughput = json.loads(capsys.readouterr().out)["throughput"]
    for record in records:
        assert throughput[record["shape"]]["tflops"] == pytest.approx(record["tflops"])
        assert throughput[record["shape"]]["source"].startswith("measured: models.json")
    assert not any(k.startswith("cnn4") and k not in cnn4 for k in throughput)
    assert throughput["convnet"]["tflops"] == S.DEFAULT_THROUGHPUT.tflops


def test_bench_models_refuses_a_model_no_run_trains(capsys):
    assert cli_main(["bench", "--models", "--scales", "demo", "--only", "resnet50", "--root",
                     str(ROOT), "--device", "cpu"]) != 0
    err = capsys.readouterr().err
    assert "--only resnet50" in err and "cnn4" in err


def test_records_written_before_shapes_read_as_of_no_shape(tmp_path):
    from fedhet.bench.gpucheck.records import append_record, make_record

    old = {k: v for k, v in make_record("paper round: engine", "bf16", "NVIDIA H200", "2.11",
                                        model="resnet18", seconds=1.0, images=100,
                                        flops_per_image=1e9).items() if k != "shape"}
    path = tmp_path / "gpu-check.json"
    path.write_text(json.dumps([old]))
    assert [r["shape"] for r in read_records(path)] == [None]
    new = make_record("model round: engine", "bf16", "NVIDIA H200", "2.11", model="cnn4",
                      shape="cnn4 width=1 1x28x28 classes=10 batch=64")
    assert [r["shape"] for r in append_record(path, new)] == [None, new["shape"]]
    with pytest.raises(ValueError, match="shape must be"):
        append_record(path, {**new, "shape": 3})

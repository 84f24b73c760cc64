"""Tests for FedLGD's ResNet-18 (`resnet18in`), the FLOP counter (fedhet.models.flops), FedLGD's
Tables 6–7 arithmetic (fedhet.methods.fedlgd.cost) and `fedhet cost`."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fedhet.methods.fedlgd import cost
from fedhet.models import build_model, flops


@pytest.mark.parametrize(
    ("name", "size", "classes", "expected"),
    [
        ("convnet", 28, 10, 311_050),
        ("convnet", 96, 2, 336_386),
        ("resnet18in", 28, 10, 11_173_962),
        ("resnet18in", 96, 2, 13_529_666),
    ],
)
def test_parameter_counts_of_table_7(name: str, size: int, classes: int, expected: int) -> None:
    assert flops.parameter_count(name, size, classes) == expected


def test_communication_table_matches_the_paper() -> None:
    table = cost.communication_table()
    assert table["unit"].startswith("values")
    assert table["rows"] == [
        {"image_size": 28, "num_classes": 10, "convnet": 311_050, "resnet18in": 11_173_962,
         "global_virtual_per_ipc": 23_520},
        {"image_size": 96, "num_classes": 2, "convnet": 336_386, "resnet18in": 13_529_666,
         "global_virtual_per_ipc": 55_296},
    ]
    assert cost.global_virtual_size(28, 10, ipc=10) == 235_200  # the text's "+ 230K" at IPC 10
    json.dumps(table)


@pytest.mark.parametrize("size", [28, 96])
def test_resnet18in_feature_classifier_split(size: int) -> None:
    model = build_model("resnet18in", 2, 3, size)
    assert model.split_points == ("layer1", "layer2", "layer3", "layer4", "penultimate")
    assert model.feature_dim == 512 and model.head.in_features == 512
    side = {28: 4, 96: 12}[size]
    assert model.split_shapes["layer4"] == (512, side, side)
    assert sum(p.numel() for p in model.classifier_parameters()) == 512 * 2 + 2
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and all(m.num_groups == m.num_channels and m.affine for m in norms)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


def test_resnet18in_mlp_only_at_96_px() -> None:
    small, large = build_model("resnet18in", 10, 3, 28), build_model("resnet18in", 2, 3, 96)
    assert not hasattr(small, "mlp")
    assert large.mlp[0].weight.shape == (512, 4608)  # Linear(4608, 512)–ReLU, before the head
    feature_ids = {id(p) for p in large.feature_parameters()}
    assert all(id(p) in feature_ids for p in large.mlp.parameters())
    # a layer4 map under 4×4 is averaged whole (16 px: 2×2)
    assert build_model("resnet18in", 7, 3, 16, width=0.25).feature_dim == 128


def _sgd_step(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = build_model("resnet18in", 2, 3, 96, width=0.125)
    x, y = torch.randn(2, 3, 96, 96), torch.tensor([0, 1])
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    nn.functional.cross_entropy(model(x), y).backward()
    optimiser.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_resnet18in_sgd_step_is_deterministic() -> None:
    first, second, other = _sgd_step(0), _sgd_step(0), _sgd_step(1)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_convnet_flops_match_a_hand_count() -> None:
    macs = [28 * 28 * 128 * 27, 14 * 14 * 128 * 1152, 7 * 7 * 128 * 1152, 1152 * 10]
    forward = 2 * sum(macs)
    assert flops.flops_per_image("convnet", 28, 10, backward=False) == forward == 77_695_488
    # backward: grad-input and grad-weight of every layer, except the first conv's grad-input
    assert flops.flops_per_image("convnet", 28, 10) == 3 * forward - 2 * macs[0]


@pytest.mark.parametrize(("name", "size", "classes"), [("convnet", 28, 10), ("resnet18in", 96, 2)])
def test_flops_are_linear_in_the_batch(name: str, size: int, classes: int) -> None:
    model = flops.meta_model(name, size, classes)
    for step in flops.STEPS:
        one = flops.step_flops(model, step, 1)
        assert one > 0 and flops.step_flops(model, step, 5) == 5 * one
    assert flops.step_flops(model, "train", 0) == 0


def test_paper_arithmetic() -> None:
    check = cost.paper_arithmetic()
    assert check["fedlgd"] == pytest.approx(3.859e6)
    assert check["vanilla"] == pytest.approx(23.8e6)


def test_computation_table_is_the_sum_of_its_steps() -> None:
    schedule = cost.Schedule(ipc=2, server_ipc=3, local_steps=4, server_steps=5, real_batch=8,
                             batch_size=4, tau_rounds=2, rounds=6)
    spec = {"image_size": 28, "num_classes": 10, "train_sizes": [50, 1000]}
    table = cost.computation_table({"toy": spec}, "convnet", schedule)
    json.dumps(table)
    assert table["unit"].startswith("FLOPs") and table["schedule"]["ipc"] == 2
    (row,) = table["rows"]
    model = flops.meta_model("convnet", 28, 10)
    f = {step: flops.step_flops(model, step, 1) for step in flops.STEPS}
    local, glob = 20, 30
    assert row["vanilla_epoch"] == 1050 * f["train"]
    assert row["fedlgd_train_in_tau"] == 2 * (local + glob) * f["train"]
    # real batch per DM step: all 50 images of the small client, 8 per class of the large one
    assert row["fedlgd_dm_step"] == (50 + 80) * f["features"] + 2 * local * f["features_to_images"]
    assert row["fedlgd_round_in_tau"] == row["fedlgd_train_in_tau"] + 4 * row["fedlgd_dm_step"]
    batches = 13  # ceil(50 / 4)
    assert row["fedlgd_round_out_tau"] == 2 * (
        (local + glob) * f["train"] + batches * glob * f["features_train"]
    )
    assert row["server_gm_step"] == glob * f["gradient_matching"]
    assert row["server_gm_round"] == 5 * row["server_gm_step"]
    assert row["vanilla_total"] == 6 * row["vanilla_epoch"]
    assert row["fedlgd_total"] == 2 * row["fedlgd_round_in_tau"] + 4 * row["fedlgd_round_out_tau"]


def test_paper_datasets() -> None:
    rows = {row["dataset"]: row for row in cost.computation_table()["rows"]}
    assert rows["DIGITS"]["real_images"] == 160_879 and rows["DIGITS"]["clients"] == 5
    assert rows["CIFAR10C"]["clients"] == 57 and rows["RETINA"]["image_size"] == 96
    for row in rows.values():  # FedLGD's local rounds outside τ cost less than a real epoch
        assert row["fedlgd_round_out_tau"] < row["vanilla_epoch"]


# -- what a scale costs before it runs (fedhet cost) ---------------------------------------------

from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from fedhet import experiments as X  # noqa: E402
from fedhet.cost import estimate as S  # noqa: E402
from fedhet.cost import throughput as T  # noqa: E402
from fedhet.cli import main as cli_main  # noqa: E402
from fedhet.config import resolve_run  # noqa: E402
from fedhet.data import DATASETS, load_dataset, split_sizes  # noqa: E402
from fedhet.data.fmnist import DEBIAN_FMNIST_DIR  # noqa: E402
from fedhet.experiments.cells import Item  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# convnet at 28 px, 3 channels, 10 classes (test_convnet_flops_match_a_hand_count)
CONVNET_MACS = [28 * 28 * 128 * 27, 14 * 14 * 128 * 1152, 7 * 7 * 128 * 1152, 1152 * 10]
CONVNET_FORWARD = 2 * sum(CONVNET_MACS)
CONVNET_TRAIN = 3 * CONVNET_FORWARD - 2 * CONVNET_MACS[0]
TINY_DATA = {"name": "digits10",
             "options": {"channels": 3, "size": 28, "train_per_class": 30, "test_per_class": 10}}


def tiny_run(**eval_settings) -> dict:
    """5 rounds, 2 of 4 clients a round, 2 local epochs, on 300 / 100 images."""
    return resolve_run({
        "dataset": TINY_DATA,
        "model": {"name": "convnet"},
        "partition": {"num_clients": 4},
        "training": {"rounds": 5, "clients_per_round": 2, "local_epochs": 2},
        "eval": {"every": 2, **eval_settings},
    })


def tiny_experiment(runs: dict[str, dict]) -> SimpleNamespace:
    """What `scale_cost` reads of an Experiment: one paper's item holding `runs`."""
    cells = [SimpleNamespace(run_ids=[rid]) for rid in runs]
    item = Item(paper="toy", id="t1", kind="table", is_figure=False, spec={}, cells=cells)
    return SimpleNamespace(scale="tiny", items={"toy_t1": item}, runs=runs,
                           run_dataset={rid: "digits10-tiny" for rid in runs})


def test_declared_sizes_need_no_data_and_every_dataset_has_them():
    assert split_sizes("digits10", TINY_DATA["options"]) == (300, 100)
    for name in DATASETS.names():
        train, test = split_sizes(name)
        assert train > 0 and test > 0, name
    assert split_sizes("cinic10", {"include_valid": True}) == (180_000, 90_000)
    assert split_sizes("digits_domains", {"domains": ["mnist", "usps"], "num_classes": 2,
                                          "train_per_class": 7}) == (7 * 2 * 2, 20 * 2 * 2)
    assert sum(split_sizes("digits5")) == 160_879 + 40_248  # FedLGD's DIGITS counts


def test_cost_of_a_tiny_run_by_hand():
    run = tiny_run()
    cost = S.scale_cost(tiny_experiment({"a": run}))
    c = cost.total
    assert (c.runs, c.train_images) == (1, 5 * (2 / 4) * 2 * 300)
    assert c.eval_images == 3 * 100  # rounds 2, 4 and the last, 5
    assert c.train_tflop == pytest.approx(1500 * CONVNET_TRAIN / 1e12, rel=1e-12)
    assert c.eval_tflop == pytest.approx(300 * CONVNET_FORWARD / 1e12, rel=1e-12)
    seconds = (c.train_tflop + c.eval_tflop) / T.DEFAULT_THROUGHPUT.tflops
    assert c.gpu_hours == pytest.approx(seconds / 3600, rel=1e-12)
    assert cost.papers["toy"] == c and cost.datasets == {"digits10-tiny": (300, 100)}
    assert cost.throughput == {"convnet": T.DEFAULT_THROUGHPUT}


def test_evaluation_counts_eval_frequency_rotations_and_client_models():
    assert S.evaluation_images(tiny_run(every=1), 100, False) == 5 * 100
    assert S.evaluation_images(tiny_run(every=2), 100, False) == 3 * 100
    assert S.evaluation_images(tiny_run(every=5), 100, False) == 1 * 100
    rotated = tiny_run(rotations=[0, 90])
    assert S.evaluation_images(rotated, 100, False) == 3 * 2 * 100
    # the global model and the round's 2 client models
    assert S.evaluation_images(tiny_run(client_models=True), 100, False) == 3 * 3 * 100
    assert S.evaluation_images(tiny_run(), 100, True) == 3 * 3 * 100
    costs = [S.scale_cost(tiny_experiment({"a": tiny_run(every=e)})).total for e in (1, 2)]
    assert costs[0].eval_tflop == pytest.approx(5 / 3 * costs[1].eval_tflop, rel=1e-12)
    assert costs[0].train_tflop == costs[1].train_tflop


def test_each_run_is_counted_once_per_scale():
    run = tiny_run()
    exp = tiny_experiment({"a": run, "b": tiny_run(every=1)})
    exp.items["toy_t2"] = Item(paper="other", id="t2", kind="table", is_figure=False, spec={},
                               cells=[SimpleNamespace(run_ids=["a"])])
    cost = S.scale_cost(exp)
    assert cost.total.runs == 2 and list(cost.papers) == ["toy"]


def _write(path: Path, content) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


RECORDS = [
    {"device": "NVIDIA H100", "mode": "bf16", "what": "paper round ResNet-18", "tflops": 60.0,
     "img_per_s": 18000, "ok": True},
    {"device": "NVIDIA H100", "mode": "fp32", "what": "paper round resnet18", "tflops": 20.0},
    {"what": "reference loop", "tflops": 5.0},  # names no model: not a model's throughput
    {"model": "convnet", "mode": "bf16", "tflops": 99.0, "ok": False},  # a failed measurement
    {"model": "convnet", "mode": "fp32", "tflops": 12.5},
]


def test_throughput_file_gives_each_model_its_measured_rate(tmp_path):
    path = _write(tmp_path / "gpu-check.json", RECORDS)
    rates = T.load_throughput(path)
    assert {m: t.tflops for m, t in rates.items()} == {"resnet18": 60.0, "convnet": 12.5}
    assert "gpu-check.json" in rates["resnet18"].source and "bf16" in rates["resnet18"].source
    assert T.load_throughput(path, mode="fp32")["resnet18"].tflops == 20.0
    assert T.load_throughput(_write(tmp_path / "o.json", {"records": RECORDS}))["convnet"].tflops \
        == 12.5
    cost = S.scale_cost(tiny_experiment({"a": tiny_run()}), rates).total
    seconds = (cost.train_tflop + cost.eval_tflop) / 12.5
    assert cost.gpu_hours == pytest.approx(seconds / 3600, rel=1e-12)


# as ci/gpu-check.sh writes them: modes with speed flags, a model named, figures null where the
# part measured none
CHECK_RECORDS = [
    {"mode": "bf16+channels_last+cudnn_benchmark", "model": "resnet18", "tflops": 44.0},
    {"mode": "bf16", "model": "resnet18", "tflops": 30.0},
    {"mode": "tf32", "model": "resnet18", "tflops": 40.0},
    {"mode": "tf32+channels_last", "model": "resnet18", "tflops": 41.0},
    {"mode": "bf16+channels_last+cudnn_benchmark", "model": None, "what": "reference loop",
     "tflops": 50.0},
    {"mode": "default", "model": "convnet", "tflops": None, "what": "real data, 3 rounds"},
    {"mode": "-", "model": None, "what": "pytest -m gpu", "tflops": None},
]


@pytest.mark.parametrize(("mode", "tflops"), [
    (None, 44.0),
    ("bf16", 44.0),  # a precision: the fastest record in it, whatever its flags
    ("tf32", 41.0),
    ("bf16+channels_last+cudnn_benchmark", 44.0),  # a whole mode: only that mode
    ("bf16+cudnn_benchmark+channels_last", 44.0),
    ("tf32+channels_last", 41.0),
])
def test_mode_picks_the_fastest_record_in_a_precision_or_a_whole_mode(tmp_path, mode, tflops):
    rates = T.load_throughput(_write(tmp_path / "gpu-check.json", CHECK_RECORDS), mode)
    assert list(rates) == ["resnet18"]  # the reference loop and the untimed run count for none
    assert rates["resnet18"].tflops == tflops


def test_a_mode_no_record_is_in_is_refused_naming_the_file_s_modes(tmp_path):
    path = _write(tmp_path / "gpu-check.json", CHECK_RECORDS)
    with pytest.raises(T.ThroughputFileError, match="no usable record in mode 'fp32'") as err:
        T.load_throughput(path, "fp32")
    assert "bf16+channels_last+cudnn_benchmark, default, tf32" in str(err.value)
    with pytest.raises(T.ThroughputFileError, match=r"in mode 'tf32\+cudnn_benchmark'"):
        T.load_throughput(path, "tf32+cudnn_benchmark")
    with pytest.raises(ValueError, match="unknown mode 'fp16'; valid: one of default"):
        T.load_throughput(path, "fp16")


@pytest.mark.parametrize(("content", "match"), [
    ("{not json", "not valid JSON"),
    ({"what": "paper round resnet18"}, "a list of records"),
    (["resnet18"], "record 0 is not an object"),
    ([{"model": "resnet18", "tflops": "fast"}], "record 0 \\(resnet18\\) has no positive"),
    ([{"model": "resnet18", "tflops": -1}], "no positive 'tflops'"),
    ([{"what": "reference loop", "tflops": 5}], "no usable record names a model"),
])
def test_malformed_throughput_files_are_refused(tmp_path, content, match):
    with pytest.raises(T.ThroughputFileError, match=match):
        T.load_throughput(_write(tmp_path / "t.json", content))


def test_cost_command_bad_input(tmp_path, capsys):
    assert cli_main(["cost", "--scale", "huge", "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert "unknown scale 'huge'" in err and "demo" in err and "paper" in err
    bad = _write(tmp_path / "t.json", "[1, 2")
    assert cli_main(["cost", "--scale", "demo", "--root", str(ROOT), "--throughput",
                     str(bad)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    missing = str(tmp_path / "absent.json")
    assert cli_main(["cost", "--scale", "demo", "--root", str(ROOT), "--throughput",
                     missing]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["cost", "--scale", "demo", "--root", str(ROOT), "--mode", "bf16"]) == 2
    assert "give --throughput FILE too" in capsys.readouterr().err
    good = _write(tmp_path / "gpu-check.json", CHECK_RECORDS)
    assert cli_main(["cost", "--scale", "demo", "--root", str(ROOT), "--throughput", str(good),
                     "--mode", "fp16"]) == 2
    assert "unknown mode 'fp16'" in capsys.readouterr().err


def test_cost_table_lists_papers_total_throughput_sizes_and_what_is_left_out(tmp_path):
    cost = S.scale_cost(tiny_experiment({"a": tiny_run()}))
    text = S.format_cost(cost)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("paper"))
    for column in ("runs", "train Gimg", "train TFLOP", "eval Gimg", "eval TFLOP", "GPU-hours"):
        assert column in lines[header]
    assert lines[header + 1].split()[:2] == ["toy", "1"]
    assert lines[header + 2].split()[:2] == ["total", "1"]
    assert "30.0 TFLOP/s: convnet" in text and "assumed" in text
    assert "digits10-tiny" in text and "300 / 100" in text
    assert "Not counted:" in text and all(what in text for what in S.not_counted())
    as_json = json.loads(json.dumps(cost.as_dict()))
    assert as_json["total"]["runs"] == 1 and as_json["datasets"]["digits10-tiny"] == {
        "train": 300, "test": 100}


@pytest.fixture(scope="module")
def demo():
    return X.load_experiment({"scale": "demo"}, ROOT)


def test_declared_sizes_match_the_demo_stand_ins(demo, tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for key, spec in demo.datasets.items():
        data = load_dataset(spec["name"], root, spec["options"])
        assert split_sizes(spec["name"], spec["options"]) == (len(data.y_train),
                                                              len(data.y_test)), key


def test_demo_cost_per_paper_sums_to_the_total(demo):
    cost = S.scale_cost(demo)
    assert set(cost.papers) == {item.paper for item in demo.items.values()}
    assert cost.total.runs == len({r for i in demo.items.values() for r in i.run_ids()})
    for field in ("train_tflop", "eval_tflop", "gpu_hours"):
        assert getattr(cost.total, field) == pytest.approx(
            sum(getattr(c, field) for c in cost.papers.values()), rel=1e-9)


@pytest.mark.skipif(not DEBIAN_FMNIST_DIR.is_dir(),
                    reason=f"{DEBIAN_FMNIST_DIR} absent: apt-get install dataset-fashion-mnist")
def test_declared_sizes_match_real_fashion_mnist(tmp_path):
    data = load_dataset("fmnist", tmp_path)
    assert split_sizes("fmnist") == (len(data.y_train), len(data.y_test)) == (60_000, 10_000)
    options = {"base_per_class": 30, "severities": [1, 3], "min_per_class": 5,
               "corruptions": ["contrast", "pixelate"]}
    corrupted = load_dataset("fmnist_corrupted", tmp_path, options)
    assert split_sizes("fmnist_corrupted", options) == (len(corrupted.y_train),
                                                        len(corrupted.y_test))


@pytest.mark.parametrize(("name", "classes", "options"),
                         [("convnet", 10, {}), ("cct", 100, {}),
                          ("vgg11", 10, {"fc": False, "projection": {"hidden": 256, "dim": 128}})])
def test_flops_per_image_equal_the_training_mode_steps(name, classes, options):
    model = flops.meta_model(name, 32, classes, 3, 1.0, json.dumps(options, sort_keys=True))
    assert flops.flops_per_image(name, 32, classes, options=options) == flops.step_flops(
        model, "train", 1)
    assert flops.flops_per_image(name, 32, classes, backward=False, options=options) == \
        flops.step_flops(model, "forward", 1)
    assert model.training  # counting left the cached model's mode as it was


def test_a_record_of_a_model_shape_costs_the_runs_of_that_shape_only(tmp_path):
    """`fedhet bench --models` records name a shape: runs of that shape cost at its figure,
    other shapes of the model at the model's own record, other models at the default."""
    run, wide = tiny_run(), tiny_run()
    wide["model"] = {**wide["model"], "width": 2.0}
    shape = S.run_shape(run)
    assert (shape.model, shape.width, shape.batch_size) == ("convnet", 1.0, 64)
    assert S.run_shape(wide).key != shape.key
    path = _write(tmp_path / "models.json", [
        {"model": "convnet", "shape": shape.key, "tflops": 7.0},
        {"model": "convnet", "shape": S.run_shape(wide).key, "tflops": 1.0, "ok": False},
        {"model": "convnet", "tflops": 3.0},
    ])
    rates = T.load_throughput(path)
    assert {k: t.tflops for k, t in rates.items()} == {shape.key: 7.0, "convnet": 3.0}
    cost = S.scale_cost(tiny_experiment({"a": run, "b": wide}), rates)
    assert {k: t.tflops for k, t in cost.throughput.items()} == {shape.key: 7.0, "convnet": 3.0}
    one = S.run_cost(run, (300, 100), T.Throughput(1.0, ""))
    two = S.run_cost(wide, (300, 100), T.Throughput(1.0, ""))
    assert cost.total.gpu_hours == pytest.approx(one.gpu_hours / 7.0 + two.gpu_hours / 3.0,
                                                 rel=1e-12)

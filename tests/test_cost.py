"""Tests for FedLGD's ResNet-18 (`resnet18in`) and fedhet.analysis.cost (Tables 6–7)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fedhet.analysis import cost
from fedhet.models import build_model


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
    assert cost.parameter_count(name, size, classes) == expected


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
    assert cost.flops_per_image("convnet", 28, 10, backward=False) == forward == 77_695_488
    # backward: grad-input and grad-weight of every layer, except the first conv's grad-input
    assert cost.flops_per_image("convnet", 28, 10) == 3 * forward - 2 * macs[0]


@pytest.mark.parametrize(("name", "size", "classes"), [("convnet", 28, 10), ("resnet18in", 96, 2)])
def test_flops_are_linear_in_the_batch(name: str, size: int, classes: int) -> None:
    model = cost.meta_model(name, size, classes)
    for step in cost.STEPS:
        one = cost.step_flops(model, step, 1)
        assert one > 0 and cost.step_flops(model, step, 5) == 5 * one
    assert cost.step_flops(model, "train", 0) == 0


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
    model = cost.meta_model("convnet", 28, 10)
    f = {step: cost.step_flops(model, step, 1) for step in cost.STEPS}
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

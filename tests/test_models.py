"""Tests for fedhet.models: shapes, split-point round trips, parameter counts, errors, imports."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

from fedhet.declare import ConfigError
from fedhet.models import MODELS, FedModel, build_model, model_options
from fedhet.registry import UnknownNameError

NARROW = 0.25
ALL_MODELS = MODELS.names()


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registered_names() -> None:
    assert set(ALL_MODELS) == {
        "resnet10",
        "resnet18",
        "resnet18in",
        "resnet34",
        "resnet50",
        "vgg9",
        "vgg11",
        "simplecnn",
        "cnn4",
        "convnet",
        "mobilenetv2",
        "cct",
    }


@pytest.mark.parametrize("name", ALL_MODELS)
def test_shapes(name: str) -> None:
    for in_channels in (1, 3):
        for size in (16, 32):
            model = build_model(name, 7, in_channels, size, width=NARROW).eval()
            x = torch.randn(2, in_channels, size, size)
            with torch.no_grad():
                assert model(x).shape == (2, 7)
                assert model.features(x).shape == (2, model.feature_dim)
            assert isinstance(model.head, nn.Linear)
            assert model.head.in_features == model.feature_dim
            assert model.num_classes == 7
            assert model.split_points[-1] == "penultimate"
            assert list(model.split_shapes) == list(model.split_points)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_split_point_round_trip(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, 7, 3, 16, width=NARROW).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        logits = model(x)
        assert torch.equal(model.forward_to(x, "penultimate"), model.features(x))
        for point in model.split_points:
            h = model.forward_to(x, point)
            assert tuple(h.shape[1:]) == model.split_shapes[point]
            assert torch.allclose(model.forward_from(h, point), logits, atol=1e-5)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_train_mode_backward(name: str) -> None:
    model = build_model(name, 5, 3, 16, width=NARROW).train()
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ALL_MODELS)
def test_state_dict_and_classifier_split(name: str) -> None:
    model = build_model(name, 10, 3, 16, width=NARROW)
    keys = list(model.state_dict())
    assert len(keys) == len(set(keys))
    head_keys = [k for k in keys if FedModel.is_classifier_key(k)]
    assert head_keys == ["head.weight", "head.bias"]
    head = list(model.classifier_parameters())
    body = list(model.feature_parameters())
    assert len(head) == 2 and all(
        p is q for p, q in zip(head, model.head.parameters(), strict=True)
    )
    assert {id(p) for p in head}.isdisjoint(id(p) for p in body)
    assert len(head) + len(body) == len(list(model.parameters()))


def test_deepcopy_and_load_state_dict_reach_stages() -> None:
    model = build_model("resnet10", 10, 3, 16, width=NARROW).eval()
    clone = copy.deepcopy(model)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(0.1)
        assert not torch.allclose(clone.forward_to(x, "layer2"), model.forward_to(x, "layer2"))
        model.load_state_dict(clone.state_dict())
        assert torch.allclose(clone.forward_to(x, "layer2"), model.forward_to(x, "layer2"))


def test_functional_call_replaces_stage_parameters() -> None:
    model = build_model("cnn4", 10, 1, 16, width=NARROW).eval()
    zeros = {k: torch.zeros_like(v) for k, v in model.named_parameters()}
    out = torch.func.functional_call(model, zeros, (torch.randn(2, 1, 16, 16),))
    assert torch.count_nonzero(out) == 0


def test_eval_restores_dropout_mode() -> None:
    model = build_model("vgg11", 10, 3, 16, width=NARROW)
    assert all(m.training for m in model.modules())
    model.eval()
    assert not any(m.training for m in model.modules())


def test_parameter_counts() -> None:
    resnet18 = build_model("resnet18", 10, 3, 32)
    assert n_params(resnet18) == 11_173_962
    assert resnet18.split_shapes["layer2"] == (128, 16, 16)  # FedImpro's 32768-d split
    assert n_params(build_model("resnet50", 10, 3, 32)) == 23_520_842
    assert n_params(build_model("vgg9", 10, 3, 32)) == 3_491_530
    assert n_params(build_model("vgg11", 10, 3, 32)) == 9_750_922


@pytest.mark.parametrize("name", ["resnet18", "vgg11", "simplecnn", "convnet", "mobilenetv2"])
def test_width_shrinks_parameters(name: str) -> None:
    assert n_params(build_model(name, 10, 3, 16, width=0.25)) < n_params(
        build_model(name, 10, 3, 16, width=0.5)
    )


def test_reference_dimensions() -> None:
    assert build_model("resnet50", 10, 3, 32, width=NARROW).feature_dim == 512  # 2048 · 0.25
    assert build_model("convnet", 10, 3, 28).feature_dim == 1152
    assert build_model("convnet", 10, 3, 32).feature_dim == 2048
    assert build_model("vgg9", 10, 3, 32).split_shapes["conv"] == (4096,)
    for size in (16, 28, 32, 64):
        assert build_model("vgg11", 10, 3, size, width=NARROW).split_shapes["conv"] == (128,)
    assert build_model("cnn4", 10, 1, 28).feature_dim == 128
    assert build_model("mobilenetv2", 100, 3, 32, width=NARROW).feature_dim == 1280


def test_simplecnn_options() -> None:
    model = build_model("simplecnn", 10, 3, 32)
    assert model.split_points == ("conv", "hidden", "penultimate")
    assert model.split_shapes["conv"] == (16, 5, 5)
    assert model.feature_dim == 256
    assert build_model("simplecnn", 10, 3, 32, proj_dim=128).feature_dim == 128
    plain = build_model("simplecnn", 10, 3, 28, projection=False)
    assert plain.split_points == ("conv", "penultimate")
    assert plain.feature_dim == 84
    assert model_options("simplecnn") == {"projection": True, "proj_dim": 256}


def test_model_options() -> None:
    assert build_model("convnet", 10, 3, 32, depth=4).split_points[-2] == "block4"
    assert build_model("convnet", 10, 3, 32, depth=4).feature_dim == 512
    stride2 = build_model("mobilenetv2", 10, 3, 32, width=NARROW, stem_stride=2)
    assert stride2.split_shapes["layer4"][1:] == (1, 1)
    assert build_model("mobilenetv2", 10, 3, 32, width=NARROW).split_shapes["layer4"][1:] == (2, 2)
    assert model_options("resnet18") == {"projection": None}


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError, match="resnet18") as info:
        build_model("resnet19", 10, 3, 32)
    assert "vgg11" in str(info.value) and "resnet19" in str(info.value)


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigError, match="proj_dmi"):
        build_model("simplecnn", 10, 3, 32, proj_dmi=64)
    with pytest.raises(ConfigError, match="dropout"):
        build_model("resnet18", 10, 3, 32, width=NARROW, dropout=0.1)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="width"):
        build_model("resnet10", 10, 3, 32, width=0.0)
    with pytest.raises(ValueError, match="image_size"):
        build_model("resnet10", 10, 3, 0)
    with pytest.raises(ValueError, match="cannot take"):
        build_model("convnet", 10, 3, 4)
    with pytest.raises(ValueError, match="cannot take"):
        build_model("simplecnn", 10, 3, 8)
    model = build_model("cnn4", 10, 1, 16, width=NARROW)
    with pytest.raises(ValueError, match="layer2"):
        model.forward_to(torch.zeros(1, 1, 16, 16), "layer2")


class _Tiny(FedModel):
    """A user-defined model: two stages over registered layers."""

    def __init__(self, register_relu: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        relu = nn.ReLU()
        if register_relu:
            self.relu = relu
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self._set_stages(
            [("conv", nn.Sequential(self.conv, relu)), ("penultimate", self.pool)],
            num_classes=3,
            in_channels=1,
            image_size=8,
        )


def test_custom_model_and_unregistered_layer() -> None:
    model = _Tiny(register_relu=True)
    assert model.split_points == ("conv", "penultimate") and model.feature_dim == 4
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    with pytest.raises(ValueError, match="unregistered ReLU"):
        _Tiny(register_relu=False)


def test_import_does_not_load_torchvision() -> None:
    code = "import fedhet.models, sys; assert 'torchvision' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

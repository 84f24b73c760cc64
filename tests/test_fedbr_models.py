"""FedBR's models: conv-only VGG-11 (``fc: false``), CCT-7/3×1 (``cct``) and the generic
``projection`` option (spec fedbr.md §3 item 6, §5 test 11)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedhet.declare import ConfigError
from fedhet.models import FedModel, build_model, model_options

MOON_PROJECTION = {"hidden": 256, "dim": 128}


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def body_params(model: FedModel) -> int:
    return sum(p.numel() for p in model.feature_parameters())


def test_vgg11_without_fc_is_fedbrs_conv_stack() -> None:
    model = build_model("vgg11", 10, 3, 32, fc=False)
    assert body_params(model) == 9_220_480  # FedBR T7: VGG-11 9.2 M
    assert model.split_points == ("block1", "block2", "block3", "block4", "penultimate")
    assert model.feature_dim == 512 and model.head.in_features == 512
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    assert all(not k.startswith("fc.") for k in model.state_dict())


def test_vgg11_default_unchanged() -> None:
    assert model_options("vgg11")["fc"] is True
    torch.manual_seed(0)
    plain = build_model("vgg11", 10, 3, 32)
    torch.manual_seed(0)
    explicit = build_model("vgg11", 10, 3, 32, fc=True)
    a, b = plain.state_dict(), explicit.state_dict()
    assert [(k, v.shape) for k, v in a.items()] == [(k, v.shape) for k, v in b.items()]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert plain.split_points == ("block1", "block2", "block3", "block4", "conv", "penultimate")
    assert n_params(plain) == 9_750_922  # as in test_models.test_parameter_counts


def test_cct_parameter_count_and_shapes() -> None:
    model = build_model("cct", 100, 3, 32)
    # SHI-Labs/Compact-Transformers src/cct.py `cct_7_3x1_32_c100` (src/utils/transformers.py
    # TransformerClassifier, seq_pool, learnable positional embedding): 3,783,269 parameters; its
    # README lists 3.760M for the 10-class CCT-7/3x1, which is 3,760,139 here.
    assert n_params(model) == 3_783_269
    assert n_params(build_model("cct", 10, 3, 32)) == 3_760_139
    assert model.split_shapes["tokens"] == (256, 256)  # 16×16 tokens of dim 256
    assert model.split_shapes["block4"] == (256, 256)
    assert model.feature_dim == 256
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert model.eval()(x).shape == (2, 100)


@pytest.mark.parametrize(
    ("channels", "size", "width"), [(3, 32, 1.0), (3, 32, 0.25), (1, 16, 0.25)]
)
def test_cct_split_points_round_trip(channels: int, size: int, width: float) -> None:
    torch.manual_seed(0)
    model = build_model("cct", 100, channels, size, width=width).eval()
    assert {"tokens", "block4", "penultimate"} <= set(model.split_points)
    x = torch.randn(2, channels, size, size)
    with torch.no_grad():
        logits = model(x)
        assert logits.shape == (2, 100)
        for point in model.split_points:
            h = model.forward_to(x, point)
            assert tuple(h.shape[1:]) == model.split_shapes[point]
            torch.testing.assert_close(model.forward_from(h, point), logits)


def test_cct_small_inputs_and_width() -> None:
    narrow = build_model("cct", 100, 3, 32, width=0.25)
    assert narrow.feature_dim == 64 and narrow.split_shapes["tokens"] == (256, 64)
    mnist_like = build_model("cct", 10, 1, 16, width=0.25)
    assert mnist_like.split_shapes["tokens"] == (64, 64)  # 8×8 tokens
    assert build_model("cct", 10, 3, 32, width=0.3).feature_dim % 4 == 0  # divisible by the heads


def test_cct_training_is_stochastic_and_seeded() -> None:
    model = build_model("cct", 10, 3, 16, width=0.25).train()
    x = torch.randn(4, 3, 16, 16)
    torch.manual_seed(1)
    first = model(x)
    torch.manual_seed(1)
    assert torch.equal(model(x), first)
    first.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ["vgg11", "cct", "resnet10", "cnn4"])
def test_projection_appends_stage(name: str) -> None:
    plain = build_model(name, 10, 3, 32, width=0.25)
    model = build_model(name, 10, 3, 32, width=0.25, projection=MOON_PROJECTION).eval()
    assert model.split_points == (*plain.split_points[:-1], "representation", "penultimate")
    assert model.split_shapes["representation"] == (plain.feature_dim,)
    assert model.feature_dim == model.head.in_features == 128
    layers = [m for m in model.projection if isinstance(m, nn.Linear)]
    sizes = [(m.in_features, m.out_features) for m in layers]
    assert sizes == [(plain.feature_dim, 256), (256, 128)]
    keys = list(model.state_dict())
    assert keys[-2:] == ["head.weight", "head.bias"]
    assert [k for k in keys if k.startswith("projection.")] == [
        "projection.0.weight", "projection.0.bias", "projection.2.weight", "projection.2.bias"
    ]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert model.features(x).shape == (2, 128)
        logits = model(x)
        for point in model.split_points:
            h = model.forward_to(x, point)
            torch.testing.assert_close(model.forward_from(h, point), logits)


def test_projection_layers_option() -> None:
    model = build_model("cnn4", 10, 1, 16, width=0.25, projection={"dim": 64, "layers": 3})
    sizes = [(m.in_features, m.out_features) for m in model.projection if isinstance(m, nn.Linear)]
    assert sizes == [(32, 256), (256, 256), (256, 64)]


def test_projection_default_leaves_model_unchanged() -> None:
    assert model_options("resnet10")["projection"] is None
    torch.manual_seed(0)
    plain = build_model("cct", 10, 3, 16, width=0.25)
    torch.manual_seed(0)
    explicit = build_model("cct", 10, 3, 16, width=0.25, projection=None)
    a, b = plain.state_dict(), explicit.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert explicit.split_points == plain.split_points
    assert not hasattr(explicit, "projection")


def test_simplecnn_keeps_its_own_projection_option() -> None:
    assert model_options("simplecnn")["projection"] is True
    assert build_model("simplecnn", 10, 3, 32, projection=False).feature_dim == 84


@pytest.mark.parametrize(
    ("value", "match"),
    [(True, "mapping"), ({"dims": 3}, "dims"), ({"dim": 0}, "dim"), ({"hidden": 1.5}, "hidden")],
)
def test_projection_errors(value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_model("resnet10", 10, 3, 16, width=0.25, projection=value)

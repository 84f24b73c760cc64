"""FedLGD's distillation maths: Siamese augmentation, class statistics, distribution matching,
the gradient-matching distance, its target and its optimisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedhet.distill import dsa
from fedhet.distill.matching import (
    class_statistics,
    dm_loss,
    gm_distance,
    images_from_statistics,
    match,
    per_sample_norm,
    synthetic_gradient,
    update_target,
)
from fedhet.models import build_model
from tiny_runs import federation_of, tiny_run

# ----------------------------------------------------------------------------- augmentation


def draws_of(group: str, n: int = 200, size: int = 28) -> list[dsa.Draw]:
    gen = torch.Generator().manual_seed(0)
    return [dsa.draw(gen, size, groups=(group,)) for _ in range(n)]


def test_one_group_per_call_drawn_uniformly():
    gen = torch.Generator().manual_seed(0)
    groups = [dsa.draw(gen, 28).group for _ in range(1200)]
    counts = {g: groups.count(g) for g in dsa.GROUPS}
    assert set(groups) == set(dsa.GROUPS)
    assert all(150 < c < 250 for c in counts.values()), counts


def test_parameter_ranges_at_28_pixels():
    assert {abs(d.values["dx"]) for d in draws_of("crop")} | {
        abs(d.values["dy"]) for d in draws_of("crop")} == {0, 1, 2, 3, 4}
    assert {d.values["side"] for d in draws_of("cutout")} == {14}
    assert max(abs(d.values["theta"]) for d in draws_of("rotate")) <= math.radians(15)
    scales = [d.values[k] for d in draws_of("scale") for k in ("sx", "sy")]
    assert 1 / 1.2 <= min(scales) and max(scales) <= 1.2


@pytest.mark.parametrize("group", dsa.GROUPS)
def test_one_draw_transforms_every_image_alike(group):
    image = torch.randn(1, 3, 16, 16)
    real, synthetic = image.expand(4, -1, -1, -1), image.expand(2, -1, -1, -1).clone()
    for d in draws_of(group, n=5, size=16):
        a, b = dsa.augment(real, d), dsa.augment(synthetic, d)
        assert torch.allclose(a, a[:1].expand_as(a), atol=1e-6)  # within a batch
        assert torch.allclose(a[:2], b, atol=1e-6)  # real and synthetic: Siamese


def test_crop_shifts_with_zero_fill_and_cutout_zeroes_a_square():
    x = torch.arange(1.0, 17.0).view(1, 1, 4, 4)
    shifted = dsa.augment(x, dsa.Draw("crop", {"dx": 1, "dy": -1}))
    assert torch.equal(shifted[0, 0], torch.tensor(
        [[0, 5, 6, 7], [0, 9, 10, 11], [0, 13, 14, 15], [0, 0, 0, 0.0]]))
    cut = dsa.augment(torch.ones(1, 1, 6, 6), dsa.Draw("cutout", {"side": 3, "cx": 0, "cy": 4}))
    zero = (cut[0, 0] == 0).nonzero().tolist()
    assert zero == [[r, c] for r in (0, 1) for c in (3, 4, 5)]  # the square, clipped


@pytest.mark.parametrize("group", dsa.GROUPS)
def test_augmentation_is_differentiable(group):
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    d = draws_of(group, n=1, size=6)[0]
    assert torch.autograd.gradcheck(lambda t: dsa.augment(t, d), (x,))


# ----------------------------------------------------------------------------- initialisation


def test_class_statistics_divide_by_the_class_count_and_the_code_by_the_client_total():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(10, 2, 3, 3, generator=gen)
    y = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    mu, sigma, counts = class_statistics(x, y, num_classes=3)
    assert counts.tolist() == [3, 7, 0]
    for c in (0, 1):
        pixels = x[y == c].transpose(0, 1).reshape(2, -1).double()
        assert torch.allclose(mu[c].double(), pixels.mean(1), atol=1e-6)
        assert torch.allclose(sigma[c].double(), pixels.std(1, unbiased=False), atol=1e-6)
    code_mu, _, _ = class_statistics(x, y, num_classes=3, divide_by="client")
    assert torch.allclose(code_mu[0], mu[0] * 3 / 10, atol=1e-6)
    assert torch.allclose(code_mu[1], mu[1] * 7 / 10, atol=1e-6)


def test_images_from_statistics_are_class_major_with_the_class_moments():
    mu = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    sigma = torch.tensor([[1.0, 0.1], [0.5, 2.0]])
    x, y = images_from_statistics(mu, sigma, ipc=400, size=8, gen=torch.Generator().manual_seed(0))
    assert x.shape == (800, 2, 8, 8) and y.tolist() == [0] * 400 + [1] * 400
    got_mu, got_sigma, _ = class_statistics(x, y, 2)
    assert torch.allclose(got_mu, mu, atol=0.02) and torch.allclose(got_sigma, sigma, rtol=0.02)


# ----------------------------------------------------------------------------- matching


def test_distribution_matching_closes_the_gap_of_class_mean_embeddings():
    torch.manual_seed(0)
    embed = nn.Sequential(nn.Flatten(), nn.Linear(2 * 4 * 4, 8), nn.Tanh())
    real = [torch.randn(30, 2, 4, 4) + 1.0, torch.randn(30, 2, 4, 4) - 1.0]
    synthetic = torch.randn(6, 2, 4, 4)
    split = lambda s: [s[:3], s[3:]]  # noqa: E731  class-major, ipc 3

    def gaps(s):
        with torch.no_grad():
            return [float(((embed(r).mean(0) - embed(v).mean(0)) ** 2).sum())
                    for r, v in zip(real, split(s))]

    before = gaps(synthetic)
    out, losses = match(synthetic, lambda s, step: dm_loss(embed, real, split(s), [None, None]),
                        steps=100, lr=0.5)
    after = gaps(out)
    assert losses[0] == pytest.approx(sum(before), rel=1e-5)
    assert all(a < 0.05 * b for a, b in zip(after, before)), (before, after)
    assert all(p.grad is None for p in embed.parameters())


def test_one_pass_over_all_classes_equals_one_pass_per_class_without_batch_norm():
    """Embedding every class at once is only a speed-up for a per-sample-normalised network
    (FedLGD's ConvNet); with batch norm the classes would share statistics, so it is refused."""
    torch.manual_seed(0)
    convnet = build_model("convnet", 3, 3, 16, width=0.125)
    real = [torch.randn(5, 3, 16, 16) + c for c in range(3)]
    synthetic = [torch.randn(2, 3, 16, 16, requires_grad=True) for _ in range(3)]
    draws = [dsa.draw(torch.Generator().manual_seed(c), 16) for c in range(3)]
    assert per_sample_norm(convnet)
    one = dm_loss(convnet.features, real, synthetic, draws, batched=True)
    each = dm_loss(convnet.features, real, synthetic, draws, batched=False)
    assert float(one) == pytest.approx(float(each), rel=1e-5)
    g_one = torch.autograd.grad(one, synthetic)
    g_each = torch.autograd.grad(each, synthetic)
    for a, b in zip(g_one, g_each):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert not per_sample_norm(build_model("resnet18", 3, 3, 16, width=0.125))


def test_gm_distance_by_hand():
    conv_s = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0]]).view(2, 1, 2, 2)
    conv_r = torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0]]).view(2, 1, 2, 2)
    lin_s = torch.tensor([[1.0, 2, 2], [0, 0, 1]])
    lin_r = torch.tensor([[-1.0, -2, -2], [0, 3, 4]])
    bias_s, bias_r = torch.tensor([1.0, 2.0]), torch.tensor([-5.0, 3.0])
    eps = 1e-6
    expected = ((1 - 1 / (1 + eps)) + (1 - 1 / (math.sqrt(2) + eps))
                + (1 - (-9) / (9 + eps)) + (1 - 4 / (5 + eps)))
    got = gm_distance([conv_s, lin_s, bias_s], [conv_r, lin_r, bias_r])
    assert float(got) == pytest.approx(expected, rel=1e-6)
    scaled = gm_distance([conv_s * torch.tensor([3.0, 0.5]).view(2, 1, 1, 1), lin_s * 7],
                         [conv_r, lin_r * 0.01])
    assert float(scaled) == pytest.approx(float(gm_distance([conv_s, lin_s], [conv_r, lin_r])),
                                          rel=1e-4)


def test_gradient_matching_approaches_a_hidden_sets_gradient():
    torch.manual_seed(0)
    model = build_model("convnet", 2, 1, 8, 0.125, depth=2)
    hidden_x, hidden_y = torch.randn(4, 1, 8, 8), torch.tensor([0, 0, 1, 1])
    target = [g.detach() for g in synthetic_gradient(model, hidden_x, hidden_y)]
    at_hidden = float(gm_distance(synthetic_gradient(model, hidden_x, hidden_y), target).detach())

    start = torch.randn(4, 1, 8, 8)
    out, losses = match(start, lambda s, step: gm_distance(
        synthetic_gradient(model, s, hidden_y), target), steps=60, lr=0.1)
    assert at_hidden < 0.01 * losses[0]  # zero but for the 1e-6 in each row's denominator
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert all(p.grad is None for p in model.parameters())


def test_the_target_of_one_client_one_full_batch_step_is_its_gradient(tmp_path):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["partition"] = {**run["partition"], "num_clients": 1, "scheme": "iid"}
    run["training"] = {**run["training"], "clients_per_round": 1, "local_steps": 1,
                       "batch_size": 120, "momentum": 0.0, "weight_decay": 0.0,
                       "augment": "none"}
    fed = federation_of(run)
    model = fed.global_.module
    before = [p.detach().clone() for p in model.parameters()]
    x = fed.augmenter.test(fed.x_train)
    loss = F.cross_entropy(model.train()(x), fed.y_train)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    lr = fed.lr_at(1)
    fed.run_round(1)
    after = [p.detach().clone() for p in fed.global_.module.parameters()]
    for g, t in zip(grads, update_target(before, after, lr)):
        assert torch.allclose(g, t, atol=1e-5, rtol=1e-4)

"""FedLGD's cached local virtual data (`fedhet.distill`) and the `distilled` plug-in that
trains every client on it."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch

from fedhet.config import resolve_run
from fedhet.data.core import CacheError
from fedhet.distill.core import load_or_make_distilled
from fedhet.distill.matching import class_statistics
from fedhet.distill.spec import distilled_key, distilled_path, settings_for_run
from fedhet.train import train
from tiny_runs import federation_of, tiny_run

FAST = {"ipc": 2, "server_ipc": 1, "warmup_steps": 3, "real_batch": 8, "embed_width": 0.125}


def distilled_run(tmp_path, **params) -> dict:
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["plugins"] = [{"name": "distilled", "params": {**FAST, **params}}]
    run["training"] = {**run["training"], "local_steps": None, "local_epochs": 1}
    return run


def settings_of(run: dict) -> dict:
    run = resolve_run(run)
    return settings_for_run(run, run["plugins"][0]["params"])


def test_the_key_follows_the_distillation_and_nothing_else(tmp_path):
    base = distilled_run(tmp_path)
    key = distilled_key(settings_of(base))
    same = copy.deepcopy(base)
    same["model"] = {"name": "convnet", "width": 0.5}
    same["training"].update(rounds=7, clients_per_round=4, lr=0.3, batch_size=4)
    assert distilled_key(settings_of(same)) == key
    # where the partition is cached is no setting: a training job of the workflow names its
    # partition's file and must find the artefact the workflow built without it
    located = copy.deepcopy(base)
    located["partition"].update(root=str(tmp_path / "elsewhere"),
                                file="resources/partitions/p-s0.npz")
    assert distilled_key(settings_of(located)) == key
    for change in ({"ipc": 3}, {"init": "noise"}, {"init_stats": "code"}, {"distill_seed": 5},
                   {"warmup_steps": 4}):
        assert distilled_key(settings_of(distilled_run(tmp_path, **change))) != key, change
    other_seed = copy.deepcopy(base)
    other_seed["seed"] = 2
    assert distilled_key(settings_of(other_seed)) != key


def test_the_spec_imports_without_torch():
    code = "import sys, fedhet.distill.spec; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_artefact_is_built_once_bit_reproducibly_and_checked(tmp_path):
    settings = settings_of(distilled_run(tmp_path))
    a = load_or_make_distilled(settings, tmp_path / "data", tmp_path / "parts")
    b = load_or_make_distilled(settings, tmp_path / "data2", tmp_path / "parts")
    assert a.checksum == b.checksum  # two builds, the same bytes
    assert len(a.x) == 4 and all(x.shape == (20, 1, 16, 16) for x in a.x)
    assert all(torch.equal(y, torch.arange(10).repeat_interleave(2)) for y in a.y)
    assert a.global_x.shape == (10, 1, 16, 16)
    path = distilled_path(settings, tmp_path / "data")
    again = load_or_make_distilled(settings, tmp_path / "data", tmp_path / "parts")
    assert again.checksum == a.checksum and path.stat().st_mtime_ns == again.path.stat().st_mtime_ns
    path.write_bytes(path.read_bytes()[:-1] + b"x")
    with pytest.raises(CacheError, match="corrupt"):
        load_or_make_distilled(settings, tmp_path / "data", tmp_path / "parts")


def test_the_global_statistics_are_the_mean_over_the_clients_holding_a_class(tmp_path):
    settings = settings_of(distilled_run(tmp_path, warmup_steps=0, server_ipc=400))
    data = load_or_make_distilled(settings, tmp_path / "data", tmp_path / "parts")
    payload = torch.load(data.path, weights_only=True)
    held = (payload["counts"] > 0).float()
    mu = (payload["mu"] * held[..., None]).sum(0) / held.sum(0)[:, None]
    got, _, _ = class_statistics(data.global_x, data.global_y, 10)
    assert torch.allclose(got, mu, atol=0.1)


def test_clients_never_train_on_raw_images(tmp_path):
    run = distilled_run(tmp_path)
    fed = federation_of(run)
    fed.x_train.copy_(torch.randint_like(fed.x_train, 0, 256))  # overwrite the raw images
    noisy = fed.run_round(1)
    clean = federation_of(run).run_round(1)
    for a, b in zip(noisy.updates, clean.updates):
        assert torch.equal(a.params, b.params)
        assert a.num_samples == 20  # C · ipc virtual images
        assert a.steps == math.ceil(20 / run["training"]["batch_size"])


def test_a_run_on_distilled_data_trains_and_records_the_artefact(tmp_path):
    final = train(distilled_run(tmp_path), tmp_path / "out", log=lambda m: None)
    assert final["status"] == "completed" and math.isfinite(final["last_acc"])


# ----------------------------------------------------------------------------- FedLGD itself


def fedlgd_run(tmp_path, **params) -> dict:
    run = distilled_run(tmp_path)
    run["plugins"] = [{"name": "fedlgd", "params": {
        **FAST, "distill_every": 2, "distill_times": 3, "local_steps": 2, "server_steps": 3,
        **params}}]
    return run


def test_the_schedule_distils_at_the_rounds_of_tau(tmp_path):
    from fedhet.methods.fedlgd.plugin import selected_rounds

    assert selected_rounds(2, 3) == {1, 3, 5, 7}
    assert selected_rounds(5, 10) == {1 + 5 * i for i in range(11)}
    run = fedlgd_run(tmp_path)
    run["training"] = {**run["training"], "rounds": 12}
    fed = federation_of(run)
    plugin = fed.plugins[0]
    start = [x.clone() for x in plugin.x]
    seen_gm, seen_dm = [], {}
    for r in range(1, 13):
        before_global = plugin.global_x.clone()
        before_local = [x.clone() for x in plugin.x]
        result = fed.run_round(r)
        clients = {u.client for u in result.updates}
        if not torch.equal(before_global, plugin.global_x):
            seen_gm.append(r)
        changed = {k for k in range(4) if not torch.equal(before_local[k], plugin.x[k])}
        if changed:
            seen_dm[r] = changed
            assert changed <= clients  # only the round's clients re-distil
    assert seen_gm == [1, 3, 5, 7]
    assert sorted(seen_dm) == [3, 5, 7]
    assert any(not torch.equal(a, b) for a, b in zip(start, plugin.x))


def test_lambda_zero_is_the_distilled_baseline_on_local_and_global_data(tmp_path):
    run = fedlgd_run(tmp_path, **{"lambda": 0.0, "server_steps": 0, "local_steps": 0})
    fed = federation_of(run)
    plugin = fed.plugins[0]
    update = fed.run_round(2).updates[0]
    assert update.num_samples == 20 + 10  # D̃_k ∪ S̃ (the code's CE on the global data)
    paper = federation_of(fedlgd_run(tmp_path, ce_on_global=False))
    assert paper.run_round(2).updates[0].num_samples == 20
    assert plugin.global_x.shape == (10, 1, 16, 16)


def test_fedlgd_resumes_bit_identically(tmp_path):
    run = fedlgd_run(tmp_path)
    run["training"] = {**run["training"], "rounds": 4}
    whole = train(run, tmp_path / "whole", log=lambda m: None)
    stopped = train(run, tmp_path / "part", tmp_path / "ckpt", stop_after=3, log=lambda m: None)
    assert stopped["status"] == "stopped"
    resumed = train(run, tmp_path / "part", tmp_path / "ckpt", log=lambda m: None)
    drop = ("mean_step_seconds",)
    assert {k: v for k, v in resumed.items() if k not in drop} == {
        k: v for k, v in whole.items() if k not in drop}
    a = torch.load(tmp_path / "whole" / "plugins" / "fedlgd" / "fedlgd_virtual.pt",
                   weights_only=True)
    b = torch.load(tmp_path / "part" / "plugins" / "fedlgd" / "fedlgd_virtual.pt",
                   weights_only=True)
    assert torch.equal(a["global_x"], b["global_x"])
    assert all(torch.equal(x, y) for x, y in zip(a["x"], b["x"]))


@pytest.mark.parametrize("reg", ["supcon", "mmd"])
def test_the_regulariser_reaches_the_global_virtual_features(tmp_path, reg):
    from fedhet.algorithms.base import ClientContext

    fed = federation_of(fedlgd_run(tmp_path, reg=reg))
    plugin = fed.plugins[0]
    plugin.global_x.requires_grad_(True)
    model = fed.global_.module
    ctx = ClientContext(client=0, round=2, lr=0.1, params=fed.global_.params,
                        grads=fed.global_.grads, buffers=fed.global_.buffers,
                        global_params=fed.global_.params, global_buffers=fed.global_.buffers,
                        num_samples=20, model=model)
    out = plugin.forward(ctx, plugin.x[0][:8], plugin.y[0][:8])
    (grad,) = torch.autograd.grad(out.loss, [plugin.global_x])
    assert grad.abs().sum() > 0
    ctx.round = 3  # a round of τ: CE only
    assert plugin.forward(ctx, plugin.x[0][:8], plugin.y[0][:8]) is None

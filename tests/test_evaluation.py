"""Evaluation: the sliced CPU forward pass and the prepared test inputs change no metric."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fedhet.engine.evaluation as evaluation
import fedhet.engine.federation as federation_module
from fedhet.engine.augment import Augmenter
from fedhet.engine.evaluation import CPU_SLICE, PreparedTestSet, exact_slice, forward_sliced
from fedhet.models import MODELS, build_model
from tiny_runs import federation_of, tiny_run


def inputs_of(n: int, seed: int) -> PreparedTestSet:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    augmenter = Augmenter("none", (0.5,) * 3, (0.25,) * 3, 16, torch.device("cpu"))
    return PreparedTestSet(x, y, augmenter, batch_size=2 * CPU_SLICE + 5)


@pytest.mark.parametrize("name", MODELS.names())
@pytest.mark.parametrize("threads", [1, 2])
def test_slicing_is_used_only_where_it_leaves_every_logit_unchanged(name, threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        decided = exact_slice(build_model(name, 10, 3, 16, 0.25), inputs_of(300, seed=0))
        torch.manual_seed(1)  # other weights, other images, the same batch sizes
        model = build_model(name, 10, 3, 16, 0.25).eval()
        with torch.no_grad():
            same = all(torch.equal(model(xb), forward_sliced(model, xb, CPU_SLICE))
                       for xb, _ in inputs_of(300, seed=1))
    finally:
        torch.set_num_threads(previous)
    assert decided in (None, CPU_SLICE)
    if decided is not None:
        assert same


def test_slicing_is_refused_for_a_model_whose_logits_depend_on_the_batch():
    class BatchMean(nn.Module):
        def forward(self, x):
            return x.flatten(1)[:, :10] - x.flatten(1)[:, :10].mean(0)

    assert exact_slice(BatchMean(), inputs_of(300, seed=0)) is None
    assert exact_slice(nn.Sequential(nn.Flatten(), nn.Linear(768, 10)).eval(),
                       inputs_of(CPU_SLICE, seed=0)) == CPU_SLICE  # one slice: nothing to check


@pytest.mark.parametrize("eval_", [{"rotations": [0, 45, 90], "client_models": True}, {}])
def test_kept_and_sliced_evaluation_scores_exactly_as_the_plain_one(tmp_path, monkeypatch, eval_):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["eval"] = {**eval_, "batch_size": 16}  # two evaluation batches of 30 images
    monkeypatch.setattr(evaluation, "CPU_SLICE", 8)  # slices inside those small batches
    fast = federation_of(run)
    result = fast.run_round(1)
    scores = fast.evaluate(16, result.updates)
    assert all(inputs._kept is not None for inputs in fast._test_inputs.values())
    assert fast.eval_slice(16) == 8

    monkeypatch.setattr(federation_module, "KEEP_BYTES", 0)
    monkeypatch.setattr(federation_module, "exact_slice", lambda *args: None)
    plain = federation_of(run)
    plain.run_round(1)
    assert plain.evaluate(16, result.updates) == scores
    assert all(inputs._kept is None for inputs in plain._test_inputs.values())
    assert plain.eval_slice(16) is None

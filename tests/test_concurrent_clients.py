"""Clients trained concurrently (`runtime.client_workers`) give exactly the sequential numbers.

Exact, not to a tolerance: every client runs the same ops in the same order on the same number
of torch threads, only on another OS thread, so its model is the same bit for bit; the round's
results are gathered in client order, so the aggregation adds the same numbers in the same
order. A difference in the last bit would mean shared state leaked between clients."""

from __future__ import annotations

import pytest
import torch

from fedhet.engine.evaluation import CPU_SLICE, evaluate_inputs
from fedhet.methods.feddecorr.plugin import FedDecorr
from fedhet.train import train
from run_outputs import metrics_without_wall_times, run_outputs, without_step_time
from tiny_runs import federation_of

# 300 test images: more than one evaluation slice (fedhet.engine.evaluation.CPU_SLICE)
DATA = {"name": "digits10", "options": {"channels": 1, "size": 16, "train_per_class": 30,
                                        "test_per_class": 30}}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("datasets"))


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()  # train() sets them from runtime.threads
    yield
    torch.set_num_threads(threads)


def dirichlet_run(data_root, tmp_path, *, seed: int, data: dict, clients: int, per_round: int,
                  min_size: int, model: str, runtime: dict, methods: dict | None = None,
                  **training) -> dict:
    """A tiny federation of Dirichlet(0.5) clients of unequal sizes, hence unequal step counts,
    trained with momentum and weight decay; `methods` holds its algorithm and plug-ins."""
    return {
        "seed": seed,
        "dataset": {**data, "options": dict(data["options"]), "root": data_root},
        "partition": {"scheme": "dirichlet", "num_clients": clients, "alpha": 0.5,
                      "min_size": min_size, "root": str(tmp_path / "partitions")},
        "model": {"name": model, "width": 0.25},
        **(methods or {}),
        "training": {"rounds": 3, "clients_per_round": per_round, "batch_size": 16, "lr": 0.05,
                     "momentum": 0.9, "weight_decay": 1e-4, **training},
        "runtime": runtime,
    }


def run_of(data_root, tmp_path, workers: int, algorithm: str = "fedavg", plugins=(),
           model: str = "cnn4", **training) -> dict:
    """3 of 5 clients train each round, on one torch thread, `workers` at a time."""
    methods = {"algorithm": {"name": algorithm},
               "plugins": [p if isinstance(p, dict) else {"name": p} for p in plugins]}
    return dirichlet_run(data_root, tmp_path, seed=5, data=DATA, clients=5, per_round=3,
                         min_size=5, model=model, methods=methods,
                         runtime={"device": "cpu", "threads": 1, "client_workers": workers,
                                  "checkpoint_every": 1}, **training)


CASES = [
    ("fedavg", (), "cnn4"),
    ("fedprox", (), "cnn4"),
    ("scaffold", (), "cnn4"),
    ("fednova", (), "cnn4"),
    ("moon", (), "simplecnn"),
    ("fedavg", ("feddecorr",), "cnn4"),
    ("scaffold", ({"name": "vhl", "params": {"virtual_kind": "noise", "virtual_per_class": 6,
                                             "virtual_batch_size": 8}},), "cnn4"),
    ("fedavg", (), "resnet10"),  # BatchNorm: running statistics stay each client's own
]


@pytest.mark.parametrize("algorithm,plugins,model", CASES)
def test_concurrent_clients_give_the_sequential_numbers(data_root, tmp_path, algorithm,
                                                        plugins, model):
    runs = {}
    for workers in (1, 3):
        out = tmp_path / f"w{workers}"
        final = train(run_of(data_root, tmp_path, workers, algorithm, plugins, model), out,
                      log=lambda m: None)
        runs[workers] = (without_step_time(final), *run_outputs(out))
    (final_seq, metrics_seq, model_seq), (final_con, metrics_con, model_con) = runs[1], runs[3]
    assert final_con == final_seq
    assert metrics_con == metrics_seq
    assert model_con.keys() == model_seq.keys()
    assert all(torch.equal(model_con[k], model_seq[k]) for k in model_seq)
    resolved = (tmp_path / "w3" / "resolved.yaml").read_text()
    assert "3 clients train at once, 1 torch thread(s) each" in resolved


def test_a_stopped_concurrent_run_resumes_to_the_sequential_numbers(data_root, tmp_path):
    run = run_of(data_root, tmp_path, 3, "scaffold", keep_client_optimizer_state=True)
    train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None, stop_after=2)
    resumed = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None)
    whole = train(run_of(data_root, tmp_path, 1, "scaffold", keep_client_optimizer_state=True),
                  tmp_path / "whole", log=lambda m: None)
    assert without_step_time(resumed) == without_step_time(whole)
    assert metrics_without_wall_times(tmp_path / "resumed" / "metrics.jsonl") == \
        metrics_without_wall_times(tmp_path / "whole" / "metrics.jsonl")


def test_undeclared_method_trains_clients_one_at_a_time(data_root, tmp_path):
    fed = federation_of(run_of(data_root, tmp_path, 3, "fedavg", ("mixup",)))
    assert fed.client_workers == 1 and len(fed.lanes) == 1
    assert "mixup not declared safe to train clients concurrently" in fed.execution


def test_a_draw_from_the_global_generator_stops_a_concurrent_run(data_root, tmp_path,
                                                                   monkeypatch):
    def noisy_loss(self, ctx, out):
        return out.features.sum() * 0 + torch.rand(()) * 0  # torch.rand: the global generator

    monkeypatch.setattr(FedDecorr, "extra_loss", noisy_loss)
    fed = federation_of(run_of(data_root, tmp_path, 3, "fedavg", ("feddecorr",)))
    with pytest.raises(RuntimeError, match="global random generator"):
        fed.run_round(1)


def test_evaluation_slices_on_the_client_threads_give_the_same_numbers(data_root, tmp_path):
    fed = federation_of(run_of(data_root, tmp_path, 3))
    fed.run_round(1)
    inputs, model = fed.test_inputs(512), fed.global_.module
    assert fed.slice_map() is not None and inputs.y.numel() > CPU_SLICE
    alone = evaluate_inputs(model, inputs, slice_size=CPU_SLICE)
    threaded = evaluate_inputs(model, inputs, slice_size=CPU_SLICE, map_slices=fed.slice_map())
    assert threaded == alone

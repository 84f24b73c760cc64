"""Tables that read per-domain accuracies (FedLGD: each client's own test set and their
unweighted average), and plug-in parameters a scale multiplies instead of replacing."""

from __future__ import annotations

import math

import pytest

from fedhet import tables as T
from fedhet.experiments.scaling import apply_scale, scaled_plugin_params
from fedhet.tables.results import result_from
from fedhet.train import summarize


def domain_payload(domains: list) -> dict:
    """One row (FedAvg) with a column per test domain entry; every cell reads the same run."""
    cells = []
    for domain in domains:
        cells.append({
            "calibrations": [], "grid": 0,
            "labels": {"method": "fedavg", "client": str(domain)},
            "display": {"method": "FedAvg", "client": str(domain)},
            "row": "FedAvg", "column": str(domain), "metrics": ["domain_acc"],
            "run_ids": ["r0", "r1"], "pending": None, "reference": {},
            "values": {"domain": str(domain)},
        })
    return {"paper": "fedlgd", "id": "tx", "kind": "accuracy",
            "spec": {"title": "Table X", "rows": ["method"], "columns": ["client"]},
            "cells": cells}


def final(accs: dict[str, float]) -> dict:
    return {"status": "completed", "best_acc": 0.5, "last_acc": 0.5, "top5_mean_acc": 0.5,
            "last_domain_acc": accs,
            "mean_domain_acc_last": sum(accs.values()) / len(accs)}


def test_a_cell_shows_its_domain_by_name_or_position_and_the_unweighted_mean():
    results = {"r0": result_from(final({"mnist": 0.90, "svhn": 0.30, "usps": 0.60}), []),
               "r1": result_from(final({"mnist": 0.80, "svhn": 0.50, "usps": 0.60}), [])}
    rows = T.compute_table(domain_payload(["mnist", "1", "mean"]), results, "demo")
    ours = {r["column"]: (r["our_mean"], r["our_std"]) for r in rows}
    assert ours["mnist"][0] == pytest.approx(85.0)  # mean of the seeds, in %
    assert ours["mnist"][1] == pytest.approx(math.sqrt(50.0))  # sample std of 90 and 80
    assert ours["1"][0] == pytest.approx(40.0)  # position 1 of the domain order: svhn
    # the unweighted mean over domains (60 and 63.33), not weighted by test-set size
    assert ours["mean"][0] == pytest.approx((60.0 + 190.0 / 3) / 2)


def test_a_domain_the_runs_do_not_score_is_an_error_naming_the_valid_ones():
    results = {"r0": result_from(final({"mnist": 0.9}), []),
               "r1": result_from(final({"mnist": 0.8}), [])}
    with pytest.raises(ValueError, match=r"test domain 'svhn'.*they score: mnist"):
        T.compute_table(domain_payload(["svhn"]), results, "demo")
    payload = domain_payload(["mnist"])
    payload["cells"][0]["values"] = {}
    with pytest.raises(ValueError, match="needs a test domain"):
        T.compute_table(payload, results, "demo")


def test_final_json_keeps_the_last_and_best_domain_mean():
    history = [{"round": 1, "test_acc": 0.4, "domain_acc": {"a": 0.2, "b": 0.6},
                "domain_loss": {"a": 2.0, "b": 1.0}, "mean_domain_acc": 0.4},
               {"round": 2, "test_acc": 0.5, "domain_acc": {"a": 0.3, "b": 0.5},
                "domain_loss": {"a": 1.5, "b": 1.2}, "mean_domain_acc": 0.35}]
    out = summarize(history, "completed", 2, None)
    assert out["last_domain_acc"] == {"a": 0.3, "b": 0.5}
    assert out["last_domain_loss"] == {"a": 1.5, "b": 1.2}
    assert out["mean_domain_acc_last"] == 0.35 and out["mean_domain_acc_best"] == 0.4


def test_a_scale_multiplies_a_plugin_parameter_so_a_sweep_stays_a_sweep():
    forced = {"local_steps": {"times": 0.1}, "server_steps": {"times": 0.04},
              "distill_times": {"times": 0.2}, "warmup_steps": 50}
    swept = [scaled_plugin_params({"name": "fedlgd", "params": {"local_steps": n}}, forced)
             for n in (50, 100, 200)]
    assert [p["local_steps"] for p in swept] == [5, 10, 20]
    # unset parameters scale from the declared default (100 local, 500 server, 10 rounds)
    assert swept[0]["server_steps"] == 20 and swept[0]["distill_times"] == 2
    assert all(isinstance(p["local_steps"], int) for p in swept)
    assert swept[0]["warmup_steps"] == 50  # a plain value is forced, as before
    # an int of at least 1 stays at least 1; 0 stays 0
    tiny = scaled_plugin_params({"name": "fedlgd", "params": {"distill_times": 2}},
                                {"distill_times": {"times": 0.2}})
    assert tiny["distill_times"] == 1
    zero = scaled_plugin_params({"name": "fedlgd", "params": {"local_steps": 0}},
                                {"local_steps": {"times": 0.1}})
    assert zero["local_steps"] == 0


def test_apply_scale_multiplies_only_the_plugins_it_names():
    run = {"training": {"rounds": 100},
           "plugins": [{"name": "fedlgd", "params": {"local_steps": 200, "lambda": 10.0}}]}
    scale = {"plugins": {"fedlgd": {"local_steps": {"times": 0.1}, "lambda": {"times": 0.5}}}}
    out = apply_scale(run, scale, "x")
    assert out["plugins"][0]["params"] == {"local_steps": 20, "lambda": 5.0}
    assert run["plugins"][0]["params"]["local_steps"] == 200  # the input is not modified

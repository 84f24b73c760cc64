"""Analytic tables (FedLGD Tables 6-7): cells computed by a registered function of their labels
from the paper's models and sizes, no run; their metrics stay in their kind of table."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhet import experiments as X
from fedhet import tables as T
from fedhet.methods.fedlgd import cost

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo():
    return X.load_experiment({"scale": "demo"}, ROOT, papers=["fedlgd"])


def values(lines):
    return {(ln["row"], ln["column"]): ln["our_mean"] for ln in lines}


def test_table7_counts_the_papers_models_exactly_and_runs_nothing(demo):
    item = demo.items["fedlgd_t7"]
    assert item.run_ids() == []
    got = values(T.compute_table(item.payload(), {}, "demo"))
    assert got[("ConvNet", "28×28")] == 311050 and got[("ConvNet", "96×96")] == 336386
    assert got[("ResNet-18", "28×28")] == 11173962
    assert got[("ResNet-18", "96×96")] == 13529666
    assert got[("global virtual data (per IPC)", "28×28")] == 10 * 3 * 28 * 28
    assert got[("global virtual data (per IPC)", "96×96")] == 2 * 3 * 96 * 96


def test_table6_reads_the_cost_model_per_dataset_and_stage(demo):
    item = demo.items["fedlgd_t6"]
    got = values(T.compute_table(item.payload(), {}, "demo"))
    rows = {r["dataset"]: r for r in cost.computation_table()["rows"]}
    assert got[("DIGITS", "Vanilla FedAvg")] == rows["DIGITS"]["vanilla_epoch"]
    assert got[("RETINA", "server (one GM step)")] == rows["RETINA"]["server_gm_step"]
    # with few local images, a distillation round costs more than a plain one
    assert got[("DIGITS", "FedLGD, r ∈ τ")] > got[("DIGITS", "FedLGD, r ∉ τ")]


def test_analytic_values_print_with_si_prefixes():
    assert T.fmt(311050.0, "count") == "311K" and T.fmt(11173962.0, "count") == "11.2M"
    assert T.fmt(3.66e13, "flops") == "36.6T"


def test_analytic_metrics_stay_in_analytic_tables(demo):
    payload = demo.items["fedlgd_t7"].payload()
    wrong = {**payload, "kind": "accuracy"}
    with pytest.raises(ValueError, match="analytic metrics go in analytic tables only"):
        T.compute_table(wrong, {}, "demo")
    mixed = {**payload, "cells": [{**c, "metrics": ["acc"]} for c in payload["cells"]]}
    with pytest.raises(ValueError, match="metric 'acc' is not shown in tables of kind analytic"):
        T.compute_table(mixed, {}, "demo")


def test_an_unknown_function_stops_the_dag(tmp_path):
    import shutil

    import yaml

    shutil.copytree(ROOT / "config", tmp_path / "config")
    shutil.copytree(ROOT / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    path = tmp_path / "config" / "papers" / "fedlgd.yaml"
    config = yaml.safe_load(path.read_text())
    config["tables"]["t7"]["function"] = "fedlgd_comms"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    with pytest.raises(X.ExperimentError, match="unknown analytic function 'fedlgd_comms'; "
                                                 "valid: fedlgd_communication"):
        X.load_experiment({"scale": "demo"}, tmp_path, papers=["fedlgd"])

"""The ranking's input: each seed of each cell of a table a challenger joined is one row
(`fedhet.leaderboard.rows.table_rows`), scored on the table's metric; a rounds table on each
seed's rounds to the table's target."""

from __future__ import annotations

import pandas as pd
import pytest

from fedhet.leaderboard.rows import results_frame, table_rows
from fedhet.tables.results import RunResult

NAN = float("nan")


def _result(acc: float, status: str = "completed") -> RunResult:
    return RunResult(status=status, best_acc=acc, last_acc=acc - 1, top5_acc=acc - 2)


def test_each_seed_of_each_joined_cell_is_one_row():
    grids = [{"axes": {"data": ["a", "b"], "method": ["base", "mine"]}},
             {"axes": {"data": ["a"], "calibration": ["oracle"]}}]  # no method axis: left out

    def cell(grid, data, method, rids, calibrations=()):
        return {"grid": grid, "labels": {"data": data, "method": method, "calibration": "none"},
                "display": {"data": data.upper(), "method": method.title()}, "run_ids": rids,
                "calibrations": list(calibrations), "pending": None, "metrics": ["last_acc"],
                "reference": {"last_acc": [70.0, 1.0]} if method == "base" else {},
                "values": {}, "chance_acc": 10.0}

    payload = {"paper": "ccvr", "id": "t1", "spec": {"grids": grids}, "cells": [
        cell(0, "a", "base", ["r1", "r2"]), cell(0, "a", "mine", ["m1", "m2"]),
        cell(0, "b", "base", ["r3", "r4"]), cell(0, "b", "mine", ["m3", "m4"]),
        cell(1, "a", "base", ["r1", "r2"], ["r1/oracle", "r2/oracle"])]}
    results = {f"{p}{i}": _result(50.0 + i) for p in "rm" for i in range(1, 5)}
    results["m4"] = _result(float("nan"), "diverged")
    costs = {rid: {"train_flops": 1e12, "bytes_per_round": 4e6, "seconds": 3.0} for rid in results}
    entry = {"payload": payload, "axis": "method", "metric": "last_acc", "seeds": [0, 1]}
    rows = pd.DataFrame(table_rows(entry, results, costs, "demo"))
    assert len(rows) == 8
    assert set(rows["setting"]) == {"calibration=none; data=a", "calibration=none; data=b"}
    first = rows.iloc[0]
    assert (first["method"], first["label"], first["seed"], first["value"]) == ("base", "Base",
                                                                                 0, 50.0)
    assert first["paper_value"] == 70.0 and first["chance"] == 10.0
    assert first["train_flops"] == 1e12
    mine = rows[rows["method"] == "mine"]
    assert list(mine["value"].iloc[:3]) == [50.0, 51.0, 52.0]  # last_acc of m1..m3
    assert mine["paper_value"].isna().all()
    assert list(mine["status"]) == ["completed"] * 3 + ["diverged"]
    frame = results_frame([entry], results, costs, "demo")
    assert list(frame.columns[:6]) == ["paper", "table", "setting", "method", "label", "seed"]


def test_a_rounds_table_is_scored_on_each_seeds_rounds_to_the_tables_target():
    grids = [{"axes": {"data": ["a"], "algorithm": ["fedavg", "mine"]}}]

    def cell(algorithm, rids):
        return {"grid": 0, "labels": {"data": "a", "algorithm": algorithm},
                "display": {"data": "A", "algorithm": algorithm}, "run_ids": rids,
                "calibrations": [], "pending": None, "metrics": ["rounds"],
                "reference": {"rounds": 80} if algorithm == "fedavg" else {},
                "values": {}, "chance_acc": 10.0}

    spec = {"grids": grids, "target": {"group_by": ["data"], "cell": {"algorithm": "fedavg"},
                                       "paper": {"a": 70.0}}}
    payload = {"paper": "fedimpro", "id": "t2", "kind": "rounds_to_target", "spec": spec,
               "cells": [cell("fedavg", ["f0", "f1"]), cell("mine", ["m0", "m1"])]}

    def run(curve, status="completed"):
        return RunResult(status=status, best_acc=max(a for _, a in curve), last_acc=curve[-1][1],
                         top5_acc=NAN, curve=curve)

    # FedAvg's best accuracies 61.5 and 60.9: our target 61 % (their mean, floored)
    results = {"f0": run([(1, 40.0), (2, 61.5), (3, 60.0)]),
               "f1": run([(1, 50.0), (2, 55.0), (3, 60.9)]),
               "m0": run([(1, 61.0), (2, 62.0), (3, 63.0)]),  # at the target in round 1
               "m1": run([(1, 30.0), (2, 40.0), (3, 50.0)])}  # never
    costs = {rid: {"train_flops": 1e12, "bytes_per_round": 4e6, "seconds": 3.0} for rid in results}
    entry = {"payload": payload, "axis": "algorithm", "metric": "rounds", "seeds": [0, 1]}
    rows = pd.DataFrame(table_rows(entry, results, costs, "demo")).set_index(["method", "seed"])
    assert rows["value"].to_dict() == pytest.approx(
        {("fedavg", 0): 2.0, ("fedavg", 1): NAN, ("mine", 0): 1.0, ("mine", 1): NAN},
        nan_ok=True)
    assert list(rows["status"]) == ["completed", "never reached", "completed", "never reached"]
    assert rows["lower_is_better"].all() and (rows["metric"] == "rounds").all()
    assert rows.loc[("fedavg", 0), "paper_value"] == 80.0
    # at paper scale the paper's printed target (70 %): nobody reaches it
    paper = pd.DataFrame(table_rows(entry, results, costs, "paper"))
    assert paper["value"].isna().all() and (paper["status"] == "never reached").all()

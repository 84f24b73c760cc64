"""Tables as a reader meets them: quoted numbers and their sources, rows that are one run or
trained alike, what a dash, an empty cell or a target means, wide tables on one line, and the
notes of what a scale changed."""

from __future__ import annotations

import math
import re

import pytest

from fedhet import tables as T
from table_helpers import demo_experiment, result, small_payload, small_results


@pytest.fixture(scope="module")
def demo():
    return demo_experiment()


# ----------------------------------------------------------------------------- quoted cells


def test_a_quoted_cell_prints_the_papers_value(tmp_path):
    payload = small_payload(quoted="FedNTD paper")
    lines = T.compute_table(payload, small_results(), "demo")
    by = {(ln["row"], ln["column"]): ln for ln in lines}
    q = by[("FedNTD", "CIFAR-10")]
    assert q["status"] == T.QUOTED == "quoted" and q["paper_value"] == 81.5
    assert math.isnan(q["our_mean"]) and math.isnan(q["our_std"]) and math.isnan(q["delta"])
    assert q["seeds"] == 0 and q["note"] == "FedNTD paper"
    assert by[("FedAvg", "CIFAR-10")]["status"] == T.OK  # its neighbours are computed as before
    T.write_csv(lines, tmp_path / "t.csv")
    csv = (tmp_path / "t.csv").read_text().splitlines()
    assert csv[0] == ",".join(T.SCHEMA)
    assert "demo,vhl,tx,FedNTD,CIFAR-10,acc,81.5,NaN,NaN,0,NaN,quoted,False" in csv
    assert "demo,vhl,tx,FedNTD,SVHN,acc,81.5,NaN,NaN,0,NaN,quoted,False" in csv
    assert "demo,vhl,tx,FedAvg,CIFAR-10,acc,70,72,NaN,1,2,ok,False" in csv
    md = T.render_markdown(lines, payload, "demo")
    assert "| FedNTD | 81.50 (quoted) | 81.50±0.50 (quoted) |" in md
    assert "| FedAvg | 70.00 / 72.00 (+2.00) | 70.00±0.50 / 68.00 (-2.00) |" in md
    assert "`(quoted)`: a number VHL quotes from another paper, not run here (FedNTD: FedNTD " \
        "paper)." in md
    assert "pending" not in md.split("|", 1)[1]  # no cell reads pending
    html = T.render_html(lines, payload, "demo")
    assert re.search(r"<td id='cell-[^']+'>81\.50 \(quoted\)</td>", html)
    assert "(FedNTD: FedNTD paper)" in html


def test_cells_without_a_quote_render_as_before():
    plain = small_payload()
    none_key = small_payload()
    for cell in none_key["cells"]:
        cell["quoted"] = None  # a missing key and None mean the same
    res = {
        **small_results(),
        "fedntd-cifar10": result(80.0, [80.0]),
        "fedntd-svhn": result(79.0, [79.0]),
    }
    a = T.compute_table(plain, res, "demo")
    b = T.compute_table(none_key, res, "demo")
    assert T.render_markdown(a, plain, "demo") == T.render_markdown(b, none_key, "demo")
    assert "quoted" not in T.render_markdown(a, plain, "demo")
    assert "quoted" not in T.render_html(a, plain, "demo")


def test_an_average_over_quoted_cells_is_quoted():
    payload = small_payload(quoted="FedNTD paper", averages=True)
    lines = T.compute_table(payload, small_results(), "demo")
    by = {(ln["row"], ln["column"]): ln for ln in lines}
    assert by[("FedAvg · Average", "")]["our_mean"] == pytest.approx(70.0)
    avg = by[("FedNTD · Average", "")]
    assert avg["status"] == T.QUOTED and avg["paper_value"] == 82.0
    assert math.isnan(avg["our_mean"]) and avg["note"] == "FedNTD paper"


def test_claims_count_quoted_pairs_on_the_papers_side_only():
    import pandas as pd

    payload = small_payload(quoted="FedNTD paper")
    lines = T.compute_table(payload, small_results(), "demo")
    frames = {"vhl_tx": pd.DataFrame(lines)}
    claim = {
        "paper": "vhl",
        "text": "FedNTD beats FedAvg",
        "metric": "acc",
        "better": {"table": "tx", "where": {"algorithm": "fedntd"}},
        "than": {"table": "tx", "where": {"algorithm": "fedavg"}},
    }
    out = T.evaluate_claim(claim, {"vhl_tx": payload}, frames)
    assert out["result"] == "quoted only" and out["ours"] == "2 pairs quoted"
    assert out["in_paper"] == "2/2 pairs hold"


# ----------------------------------------------------------------------------- what a reader needs


def three_methods(run_ids: dict[str, str]) -> dict:
    """FedAvg, FedProx and FedNova × IPC=10, IPC=50 on two clients: run_ids[(method)] names
    each method's IPC=10 runs (its IPC=50 runs are its own)."""
    cells = []
    for method in ("FedAvg", "FedProx", "FedNova"):
        for ipc in ("IPC=10", "IPC=50"):
            for client in ("MNIST", "USPS"):
                rid = run_ids[method] if ipc == "IPC=10" else f"{method}-50"
                cells.append({"calibrations": [], "grid": 0,
                              "labels": {"method": method.lower(), "ipc": ipc, "client": client},
                              "display": {"method": method, "ipc": ipc, "client": client},
                              "row": method, "column": f"{client} · {ipc}", "metrics": ["acc"],
                              "run_ids": [rid], "pending": None, "reference": {"acc": 70.0},
                              "values": {}})
    spec = {"title": "Table 1", "rows": ["method"], "columns": ["client", "ipc"]}
    return {"paper": "fedlgd", "id": "t1", "kind": "accuracy", "spec": spec, "cells": cells}


def logged(losses: list[float], best: float = 50.0) -> T.RunResult:
    r = result(best, [best / 2, best])
    r.logged = [x for i, loss in enumerate(losses) for x in (i + 1, loss, loss + 0.1)]
    return r


def test_runs_that_trained_alike_are_named_and_counted_once():
    """FedAvg, FedProx and FedNova at IPC=10 logged the same losses (FedNova's to float
    rounding): the table says they trained alike in the IPC=10 columns; at IPC=50 they
    differ."""
    payload = three_methods({"FedAvg": "a10", "FedProx": "p10", "FedNova": "n10"})
    res = {"a10": logged([2.30, 2.10]), "p10": logged([2.30, 2.10]),
           "n10": logged([2.30000001, 2.10000002]),
           "FedAvg-50": logged([2.3, 1.9], 60), "FedProx-50": logged([2.3, 1.8], 61),
           "FedNova-50": logged([2.3, 1.7], 62)}
    alike = T.alike_runs(res)
    assert alike == {"a10": "a10", "n10": "a10", "p10": "a10"}
    lines = T.compute_table(payload, res, "demo")
    groups = T.identical_rows(lines, payload, alike)
    assert groups == [(["FedAvg", "FedProx", "FedNova"], "alike", ["MNIST · IPC=10",
                                                                  "USPS · IPC=10"])]
    html = T.render_html(lines, payload, "demo", deltas=False, alike=alike)
    assert ("FedAvg = FedProx = FedNova in the IPC=10 columns: separate runs that trained "
            "alike") in html and "Count them once." in html
    assert "FedProx&#x27;s proximal term is zero" in html
    assert "Identical rows" not in T.render_html(lines, payload, "demo", deltas=False)


def test_rows_of_one_run_are_said_to_be_one():
    payload = three_methods({"FedAvg": "a10", "FedProx": "a10", "FedNova": "n10"})
    res = {rid: logged([2.3, 2.0 + i / 10]) for i, rid in
           enumerate(["a10", "n10", "FedAvg-50", "FedProx-50", "FedNova-50"])}
    lines = T.compute_table(payload, res, "demo")
    md = T.render_markdown(lines, payload, "demo", alike=T.alike_runs(res))
    assert "FedAvg = FedProx in the IPC=10 columns: one run at this scale" in md
    assert "FedNova" not in md.split("Identical rows:")[1].split("\n")[0]


def test_a_dash_an_empty_cell_and_a_rows_target_are_explained():
    payload = small_payload()
    payload["cells"][1]["reference"] = {"acc": None}  # the paper prints no number
    payload["cells"] = payload["cells"][:3]  # FedNTD has no SVHN cell
    res = {**small_results(), "fedntd-cifar10": result(60.0, [30.0, 60.0])}
    lines = T.compute_table(payload, res, "demo")
    md = T.render_markdown(lines, payload, "demo")
    assert "| FedAvg | 70.00 / 72.00 (+2.00) | – / 68.00 |" in md
    assert "–: the paper has no number to compare there." in md
    assert "An empty cell: the paper's table has no such cell." in md


def test_quoted_numbers_name_their_source_per_method_once():
    payload = small_payload(quoted="Sun et al., ICLR 2023, as quoted by VHL")
    lines = T.compute_table(payload, small_results(), "demo")
    html = T.render_html(lines, payload, "demo")
    assert html.count("as quoted by") == 0
    assert "<i>(quoted)</i>: a number VHL quotes from another paper, not run here (FedNTD: " \
           "Sun et al., ICLR 2023)." in html
    payload = small_payload(quoted="as quoted by VHL")
    lines = T.compute_table(payload, small_results(), "demo")
    assert "(FedNTD: its source is not given)" in T.render_markdown(lines, payload, "demo")


def test_a_wide_tables_cells_stay_on_one_line_and_it_fits_its_page():
    payload = small_payload(quoted="FedNTD paper")
    lines = T.compute_table(payload, small_results(), "demo")
    html = T.render_html(lines, payload, "demo")
    assert "white-space:nowrap" in html and "getBoundingClientRect" in html  # fits the pane


def test_the_methods_settings_a_scale_changed_fold_under_one_line():
    payload = small_payload(quoted="FedNTD paper")
    lines = T.compute_table(payload, small_results(), "demo")
    note = ["Changed from the paper: CIFAR-10 → digits; 12 rounds instead of 1,000.",
            "VHL: virtual images per class 50 instead of 200.",
            "FedLGD: distillation rounds |τ| 2 instead of 10."]
    html = T.render_html(lines, payload, "demo", note)
    assert "<p>Changed from the paper: CIFAR-10 → digits; 12 rounds instead of 1,000.</p>" in html
    assert ("<details><summary>The methods' settings this scale changed (VHL, FedLGD)</summary>"
            "<p>VHL: virtual images per class 50 instead of 200.</p>") in html
    assert " ".join(note) in T.render_markdown(lines, payload, "demo", note)


def test_an_analytic_tables_note_lists_no_training_change(demo):
    assert demo.items["fedlgd_t6"].scale_changes == ""
    assert demo.items["fedlgd_t7"].scale_change_parts == []
    assert demo.items["fedlgd_t1"].scale_changes.startswith("Changed from the paper")


def test_rows_the_paper_repeats_are_one_run_as_in_the_paper_and_calibrations_differ():
    """VHL Table 6 repeats its default configuration in several rows (the same settings as the
    paper gives them): one run, as in the paper. CCVR's calibrated rows share their run but
    not their calibration: not the same."""
    payload = three_methods({"FedAvg": "a10", "FedProx": "a10", "FedNova": "n10"})
    for cell in payload["cells"]:
        cell["paper_run"] = "default-run" if cell["row"] != "FedNova" else "other"
    res = {rid: logged([2.3, 2.0 + i / 10]) for i, rid in
           enumerate(["a10", "n10", "FedAvg-50", "FedProx-50", "FedNova-50"])}
    lines = T.compute_table(payload, res, "demo")
    assert T.identical_rows(lines, payload) == [(["FedAvg", "FedProx"], "paper",
                                                 ["MNIST · IPC=10", "USPS · IPC=10"])]
    assert "one run, as in the paper" in T.render_markdown(lines, payload, "demo")
    for cell in payload["cells"]:
        if cell["row"] == "FedProx":
            cell["calibrations"] = [f"{rid}/ccvr" for rid in cell["run_ids"]]
    assert T.identical_rows(lines, payload) == []

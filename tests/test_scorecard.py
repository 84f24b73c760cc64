"""The scorecard's verdict rule, on synthetic tables that hit each part of it: universal wording
needs every pair whatever the config says; a difference within the tie margin (or the seeds'
spread) is a tie, not a win; rows with identical numbers are the same runs and count once; the
verdict names the stand-in that ran; fewer than three distinct pairs is not enough evidence;
"0/0 pairs hold" is never printed; the scope has no leading space; every pair links its cells
into their tables; the report's landing text counts the verdicts and links the scorecard."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from fedhet import tables as T
from fedhet.report import page
from fedhet.tables import claims as C
from fedhet.tables import scorecard as S

ROOT = Path(__file__).resolve().parents[1]

NAMES = {"ours": "Ours", "fedavg": "FedAvg", "fedprox": "FedProx", "fednova": "FedNova",
         "c10": "CIFAR-10", "svhn": "SVHN", "c100": "CIFAR-100", "fmnist": "FMNIST"}


def cell(method: str, dataset: str, paper: float = 70.0, **extra) -> dict:
    labels = {"method": method, "dataset": dataset}
    return {"labels": labels, "display": {k: NAMES[v] for k, v in labels.items()},
            "row": NAMES[method], "column": NAMES[dataset], "metrics": ["acc"],
            "reference": {"acc": paper}, "pending": None, **extra}


def table(values: dict, std: float = math.nan, seeds: int = 1, **extra) -> tuple[dict, object]:
    """A payload and its long table: `values` (method, dataset) → our accuracy; every cell's
    std and seeds alike; `extra` goes into every cell (a stand-in)."""
    cells = [cell(m, d, **extra) for m, d in values]
    frame = pd.DataFrame([{
        "row": c["row"], "column": c["column"], "metric": "acc", "paper_value": 70.0,
        "our_mean": values[(c["labels"]["method"], c["labels"]["dataset"])], "our_std": std,
        "seeds": seeds, "status": T.OK, "near_chance": False} for c in cells])
    return {"paper": "p", "id": "t1", "spec": {"title": "Table 1"}, "cells": cells}, frame


def claim(text: str, than=("fedavg",), require: str = "all", **extra) -> dict:
    return {"paper": "p", "text": text, "metric": "acc", "require": require,
            "better": {"table": "t1", "where": {"method": "ours"}},
            "than": {"table": "t1", "where": {"method": list(than)}}, **extra}


def check(c: dict, values: dict, **kw) -> dict:
    payload, frame = table(values, **{k: kw.pop(k) for k in ("std", "seeds") if k in kw})
    return T.evaluate_claim(c, {"p_t1": payload}, {"p_t1": frame}, **kw)


DATASETS = ("c10", "svhn", "c100", "fmnist")


# ----------------------------------------------------------------------------- universal words


def test_a_universal_claim_with_one_exception_is_not_reproduced_whatever_its_config():
    """Three wins and one loss of four: a majority, but "every" needs them all."""
    values = {}
    for d, ours in zip(DATASETS, (75.3, 74.1, 73.7, 60.2), strict=True):
        values[("ours", d)], values[("fedavg", d)] = ours, 65.0
    out = check(claim("Ours beats FedAvg on every dataset", require="majority"), values)
    assert out["result"] == "not reproduced"
    assert out["require"] == "all" and "“every”" in out["rule"]
    assert out["ours"] == "3/4 pairs hold, 1 against"
    # the same numbers for a claim on "most": a majority is enough
    out = check(claim("Ours beats FedAvg on most datasets", require="majority"), values)
    assert out["result"] == "reproduced" and out["require"] == "majority"


def test_universal_words_are_found_in_the_claims_text():
    assert C.universal_words("The oracle is an upper bound of CCVR") == ["upper bound"]
    assert C.universal_words("Each of FedBR's two components alone beats FedAvg") == ["each"]
    assert C.universal_words("FedBR improves each base method it is added to") == ["each"]
    assert C.universal_words("VHL improves most base algorithms in every setting") == []
    assert C.universal_words("FedImpro needs fewer rounds than FedAvg") == []
    assert C.required({"text": "X is never worse", "require": "majority"})[0] == "all"
    assert C.required({"text": "X beats Y", "require": "majority"}) == ("majority", "")


def test_the_configs_say_what_their_claims_words_say():
    """A claim in universal words is configured `require: all` (CCVR's oracle "upper bound",
    FedBR's "each"), a claim on "most" `majority`: the page's rule and the configs agree."""
    for path in sorted((ROOT / "config" / "papers").glob("*.yaml")):
        for c in yaml.safe_load(path.read_text()).get("claims") or []:
            if C.universal_words(c["text"]):
                assert c.get("require", "all") == "all", (path.name, c["text"])
            if re.search(r"\bmost\b", c["text"]):
                assert c.get("require") == "majority", (path.name, c["text"])


# ----------------------------------------------------------------------------- the noise floor


def test_a_win_within_the_margin_is_a_tie_not_a_win():
    """Ours ahead by 0.2 points in each of three datasets: three ties, not reproduced."""
    values = {}
    for d, base in zip(DATASETS[:3], (61.37, 58.91, 64.03), strict=True):
        values[("ours", d)], values[("fedavg", d)] = base + 0.2, base
    text = "Ours beats FedAvg on every dataset"
    out = check(claim(text), values)
    assert out["result"] == "not reproduced"
    assert out["ours"] == "0/3 pairs hold, 3 tied" and out["ties"] == 3
    assert "ties within 1 point" in out["rule"]
    # a claim's own margin, smaller than the difference: the wins count
    assert check(claim(text, margin=0.1), values)["result"] == "reproduced"
    # the configured margin (config.yaml → leaderboard.tie_margin) likewise
    assert check(claim(text), values, tie_margin=0.05)["result"] == "reproduced"
    # three seeds each, spread 0.05: a 0.2-point lead is beyond the seeds' spread
    assert check(claim(text), values, std=0.05, seeds=3)["result"] == "reproduced"
    # spread 0.5: within it
    assert check(claim(text), values, std=0.5, seeds=3)["result"] == "not reproduced"
    # two seeds: the margin still decides
    assert check(claim(text), values, std=0.05, seeds=2)["result"] == "not reproduced"


def test_the_outcome_of_a_pair():
    line = lambda v, std=math.nan, seeds=1: SimpleNamespace(  # noqa: E731
        our_mean=v, our_std=std, seeds=seeds)
    assert C.outcome(line(71.5), line(70.0), "higher", 1.0) == "holds"
    assert C.outcome(line(70.5), line(70.0), "higher", 1.0) == "tie"
    assert C.outcome(line(71.0), line(70.0), "higher", 1.0) == "tie"  # within, inclusive
    assert C.outcome(line(68.0), line(70.0), "higher", 1.0) == "against"
    assert C.outcome(line(12.0), line(15.0), "lower", 1.0) == "holds"  # fewer rounds
    assert C.outcome(line(math.nan), line(15.0), "lower", 1.0) == "against"
    assert C.outcome(line(math.nan), line(math.nan), "lower", 1.0) == "tie"


# ----------------------------------------------------------------------------- identical runs


def test_three_identical_baselines_count_once():
    """FedAvg, FedProx and FedNova with the very same numbers (one local step a round): the
    six pairs of two datasets are two distinct pairs, too few for a verdict; on three
    datasets, three."""
    base = {"c10": 51.37, "svhn": 48.21, "c100": 22.53}
    values = {}
    for d in ("c10", "svhn"):
        values[("ours", d)] = base[d] + 5.0
        for m in ("fedavg", "fedprox", "fednova"):
            values[(m, d)] = base[d]
    c = claim("Ours beats every baseline", than=("fedavg", "fedprox", "fednova"))
    out = check(c, values)
    assert out["result"] == "not enough evidence" and out["distinct"] == 2
    assert out["ours"] == ("2/2 pairs hold, 4 more repeat identical runs "
                           "(FedProx, FedNova = FedAvg)")
    values[("ours", "c100")] = base["c100"] + 5.0
    for m in ("fedavg", "fedprox", "fednova"):
        values[(m, "c100")] = base["c100"]
    out = check(c, values)
    assert out["result"] == "reproduced" and out["distinct"] == 3
    assert out["ours"].startswith("3/3 pairs hold, 6 more repeat identical runs")
    outcomes = [p["outcome"] for p in out["evidence"]]
    assert outcomes == ["holds"] * 3 + ["repeat"] * 6


def test_rows_are_the_same_runs_only_when_all_their_numbers_agree():
    frame = pd.DataFrame([
        {"row": r, "column": c, "metric": "acc", "our_mean": v, "our_std": math.nan,
         "status": T.OK}
        for r, c, v in [("A", "x", 51.37), ("A", "y", 48.21), ("B", "x", 51.37),
                        ("B", "y", 48.21), ("C", "x", 51.37), ("C", "y", 47.93),
                        ("D", "x", 60.0), ("D", "y", 55.0), ("E", "x", 60.0), ("E", "y", 55.0),
                        ("F", "x", 33.33), ("G", "x", 33.33)]])
    # B repeats A; C differs in one number; D and E agree only on whole numbers, F and G on
    # one number: not enough to call them the same runs
    assert C.same_rows(frame) == {"B": "A"}


# ----------------------------------------------------------------------------- stand-ins


def test_the_verdict_names_the_stand_in_that_ran():
    values = {}
    for d, ours in zip(DATASETS[:3], (75.3, 74.1, 73.7), strict=True):
        values[("ours", d)], values[("fedavg", d)] = ours, 65.0
    stand_in = {"name": "grey handwritten digits (16 px, 200 training images a class)",
                "for": "FMNIST"}
    payload, frame = table(values, stand_in=stand_in)
    payload["cells"][0]["runs_as"] = {"method": "Ours (2)"}  # a label that ran otherwise
    out = T.evaluate_claim(claim("Ours beats FedAvg on every dataset"), {"p_t1": payload},
                           {"p_t1": frame})
    assert out["result"] == "reproduced"
    assert out["ran_on"] == ("grey handwritten digits (16 px, 200 training images a class) "
                             "standing in for FMNIST; Ours (2) in place of the paper's Ours")
    html = S.render_html([out], "demo", 1, "Not comparable.")
    assert ("reproduced</span> on grey handwritten digits (16 px, 200 training images a class) "
            "standing in for FMNIST") in html
    md = S.render_markdown([out], "demo", 1, "Not comparable.")
    assert "**reproduced** on grey handwritten digits" in md


def test_the_demo_tables_say_what_stood_in_for_their_datasets_and_settings(demo):
    vhl = demo.items["vhl_t2"].claim_payload()
    assert {c["stand_in"]["for"] for c in vhl["cells"]} == {"FMNIST"}
    assert {c["stand_in"]["name"] for c in vhl["cells"]} == {
        "grey handwritten digits (16 px, 200 training images a class)"}
    assert vhl["left_out"] == demo.items["vhl_t2"].left_out
    fedlgd = demo.items["fedlgd_t2"].claim_payload()
    assert {c["runs_as"]["ipc"] for c in fedlgd["cells"] if c["labels"]["ipc"] == "ipc10"} \
        == {"IPC=2"}
    # the tables' own payloads are unchanged (no rerun of a table for the scorecard's sake)
    assert "stand_in" not in demo.items["vhl_t2"].payload()["cells"][0]
    assert "runs_as" not in demo.items["fedlgd_t2"].payload()["cells"][0]


@pytest.fixture(scope="module")
def demo():
    from fedhet import experiments as X

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = []
    return X.load_experiment({**cfg, "scale": "demo"}, ROOT)


# ----------------------------------------------------------------------------- enough evidence


def test_fewer_than_three_distinct_pairs_is_not_enough_evidence():
    values = {("ours", "c10"): 80.4, ("fedavg", "c10"): 70.2,
              ("ours", "svhn"): 81.7, ("fedavg", "svhn"): 70.9}
    out = check(claim("Ours beats FedAvg on every dataset"), values)
    assert out["result"] == "not enough evidence"
    assert out["ours"] == "2/2 pairs hold"
    assert C.MIN_PAIRS == 3


def test_no_count_of_nothing_is_printed():
    values = {("ours", d): 80.4 for d in DATASETS[:3]} | {("fedavg", d): 70.2
                                                           for d in DATASETS[:3]}
    payload, frame = table(values)
    frame["near_chance"] = True
    out = T.evaluate_claim(claim("Ours beats FedAvg"), {"p_t1": payload}, {"p_t1": frame})
    assert out["result"] == "near chance at this scale"
    assert "0/0" not in out["ours"] and out["ours"] == "3 pairs near chance (not compared)"
    payload["cells"] = [dict(c, reference={"acc": None}) for c in payload["cells"]]
    frame["paper_value"] = math.nan
    out = T.evaluate_claim(claim("Ours beats FedAvg"), {"p_t1": payload}, {"p_t1": frame})
    assert out["in_paper"] == "no numbers in the paper"


# ----------------------------------------------------------------------------- the CSV and links


def test_the_scorecard_script_writes_scopes_without_leading_spaces(tmp_path):
    """The workflow's script end to end on a synthetic table: the CSV's scope has no leading
    space, and the page's pairs link cells that the table's page anchors."""
    import importlib.util

    values = {}
    for d, ours in zip(DATASETS[:3], (75.3, 74.1, 73.7), strict=True):
        values[("ours", d)], values[("fedavg", d)] = ours, 65.0
    payload, frame = table(values)
    left = cell("ours", "fmnist"), cell("fedavg", "fmnist")
    tables = tmp_path / "results" / "demo" / "tables" / "p"
    tables.mkdir(parents=True)
    T.write_csv([{"scale": "demo", "paper": "p", "table": "t1", **row, "delta": math.nan}
                 for row in frame.to_dict("records")], tables / "t1.csv")
    payload = {**payload, "left_out": list(left)}
    out_dir = tmp_path / "results" / "demo"
    sm = SimpleNamespace(
        params=SimpleNamespace(payload={
            "claims": [claim("Ours beats FedAvg on every dataset")],
            "payloads": {"p_t1": payload}, "seeds": [0], "warning": "Not comparable.",
            "tie_margin": 1.0}),
        wildcards=SimpleNamespace(scale="demo"),
        input=SimpleNamespace(tables=[str(tables / "t1.csv")]),
        output=SimpleNamespace(csv=str(out_dir / "scorecard.csv"),
                               md=str(out_dir / "scorecard.md"),
                               html=str(out_dir / "scorecard.html")))
    spec = importlib.util.spec_from_file_location(
        "scorecard_script", ROOT / "workflow" / "scripts" / "scorecard.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(sm)
    csv = pd.read_csv(out_dir / "scorecard.csv", keep_default_na=False)
    assert csv.loc[0, "scope"] == "on CIFAR-10, SVHN, CIFAR-100 only; FMNIST not run at this scale"
    assert csv.loc[0, "result"] == "reproduced" and csv.loc[0, "distinct"] == 3
    assert not any(str(v).startswith(" ") for v in csv.loc[0])
    page_html = (out_dir / "scorecard.html").read_text()
    links = re.findall(r"<a href='([^'#]+)#([^']+)' data-result='([^']+)' data-anchor='\2'>",
                       page_html)
    assert len(links) == 6  # three pairs, two cells each
    assert {(href, result) for href, _, result in links} == {
        ("tables/p/t1.html", "results/demo/tables/p/t1.html")}
    # the table's own page has an element with each id
    lines = frame.assign(scale="demo", paper="p", table="t1", delta=math.nan).to_dict("records")
    table_html = T.render_html(lines, payload, "demo")
    for _, anchor, _ in links:
        assert f"id='{anchor}'" in table_html
    assert "parent.postMessage" in page_html  # inside the report, a click asks it to open


def test_every_shown_cell_of_a_table_has_its_anchor(demo):
    """The anchors the scorecard links (`cell_anchor` of a line's row, column and metric) are
    on the table's page for every line it shows, a gain shown inside its accuracy cell too."""
    from fedhet.tables.render import cell_anchor

    for target in ("ccvr_t2", "fedimpro_t1", "vhl_t1", "fedlgd_t1"):
        item = demo.items[target]
        payload = item.payload()
        lines = [{"scale": "demo", "paper": item.paper, "table": item.id, "row": c["row"],
                  "column": c["column"], "metric": m, "paper_value": 50.0, "our_mean": 60.0,
                  "our_std": math.nan, "seeds": 1, "delta": 10.0, "status": T.OK,
                  "near_chance": False} for c in payload["cells"] for m in c["metrics"]]
        html = T.render_html(lines, payload, "demo")
        for line in lines:
            if line["metric"] != "target":
                anchor = cell_anchor(line["row"], line["column"], line["metric"])
                assert f"id='{anchor}'" in html, (target, line["row"], line["column"])


# ----------------------------------------------------------------------------- the landing text


def test_the_landing_text_counts_the_verdicts_in_colour_and_links_the_scorecard(tmp_path,
                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "demo").mkdir(parents=True)
    pd.DataFrame({"result": ["reproduced"] * 2 + ["not reproduced"] * 3
                  + ["not enough evidence"]}).to_csv("results/demo/scorecard.csv", index=False)
    results = {"results/demo/scorecard.html": {"mime_type": "text/html", "data_uri": "data:"}}
    from fedhet.report.__main__ import verdicts as landing_verdicts

    html = landing_verdicts(results)
    assert "<b>6 claims:</b>" in html
    for verdict, n in (("reproduced", 2), ("not reproduced", 3), ("not enough evidence", 1)):
        fg, bg = S.VERDICTS[verdict]
        assert f"color:{fg};background:{bg}" in html and f">{n} {verdict}</span>" in html
    assert "data-fedhet-result='results/demo/scorecard.html'" in html
    assert landing_verdicts({}) == "<p>This report holds no scorecard.</p>"
    # finished into the landing text's placeholder, with the script that opens the link
    text = ('<h1>t</h1><div class="fedhet-provenance docutils container">x</div>'
            '<div class="fedhet-verdicts docutils container"><p>later</p></div>')
    # a library's `var results` first, not the report's
    report = ("<html><head><title>Snakemake Report</title></head><body><script>\n"
              "var results = new Array(3);\n</script>\n<script id=\"workflow-desc\">\n"
              f"    var workflow_desc = {json.dumps(text)};\n</script>\n<script id=\"results\">\n"
              f"    var results = {json.dumps(results)};\n    </script></body></html>")
    assert page.results_of(report) == results
    done = page.finish(report, title="t", css="", provenance_html="p", verdicts_html=html)
    desc = json.loads(re.search(r"var workflow_desc = (.*);", done).group(1).replace("<\\/",
                                                                                      "</"))
    assert html in desc and "later" not in desc
    assert done.count(f'<script id="{page.SCRIPT_ID}">') == 1
    again = page.finish(done, title="t", css="", provenance_html="p", verdicts_html=html)
    assert page.finish(again, title="t", css="", provenance_html="p",
                       verdicts_html=html) == again  # idempotent
    assert again.count(f'<script id="{page.SCRIPT_ID}">') == 1

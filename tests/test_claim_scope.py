"""A claim's verdict follows the part of it that ran: the scorecard counts the paper's side on
all of the claim's pairs (those a scale leaves out included, so the claim's text and the paper
column agree) and says which part of ours was compared (datasets, settings, models), or that
none was."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedhet import experiments as X
from fedhet import tables as T
from fedhet.tables.claims import NEAR_CHANCE, NOT_RUN, scope

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- synthetic tables


def cell(dataset: str, method: str, paper: float, model: str = "m1") -> dict:
    labels = {"dataset": dataset, "method": method, "model": model}
    names = {"c10": "CIFAR-10", "svhn": "SVHN", "c100": "CIFAR-100", "m1": "ConvNet",
             "m2": "ResNet-18", "m3": "MobileNetV2", "fedavg": "FedAvg", "ours": "Ours",
             "prox": "FedProx"}
    return {"labels": labels, "display": {k: names.get(v, v) for k, v in labels.items()},
            "row": f"{names[method]} · {names[model]}", "column": names[dataset],
            "metrics": ["acc"], "reference": {"acc": paper}, "pending": None}


def frame(cells: list[dict], ours, near=lambda labels: False) -> pd.DataFrame:
    """The long table of `cells` as the table job writes it: ours from `ours(labels)`."""
    return pd.DataFrame([{
        "row": c["row"], "column": c["column"], "metric": "acc",
        "paper_value": c["reference"]["acc"], "our_mean": ours(c["labels"]),
        "status": T.OK, "near_chance": near(c["labels"])} for c in cells],
        columns=["row", "column", "metric", "paper_value", "our_mean", "status", "near_chance"])


CLAIM = {"paper": "p", "text": "Ours beats FedAvg on every dataset", "metric": "acc",
         "better": {"table": "t1", "where": {"method": "ours"}},
         "than": {"table": "t1", "where": {"method": "fedavg"}}, "require": "all"}


def ours_wins(labels) -> float:
    return 60.0 if labels["method"] == "ours" else 50.0


MODELS = ("m1", "m2", "m3")
DATASETS = ("c10", "svhn", "c100")


def test_a_claim_on_one_of_three_datasets_says_which_ran():
    """Three models on CIFAR-10 run (three pairs: enough for a verdict), SVHN and CIFAR-100
    do not."""
    ran = [cell("c10", m, 80.0 if m == "ours" else 70.0, model) for model in MODELS
           for m in ("ours", "fedavg")]
    left = [cell(d, m, 80.0 if m == "ours" else 70.0, model) for d in ("svhn", "c100")
            for model in MODELS for m in ("ours", "fedavg")]
    left[-2]["reference"]["acc"] = 60.0  # the paper's own exception, on CIFAR-100
    payloads = {"p_t1": {"cells": ran, "left_out": left}}
    out = T.evaluate_claim(CLAIM, payloads, {"p_t1": frame(ran, ours_wins)})
    assert out["result"] == "reproduced"
    assert out["scope"] == "on CIFAR-10 only; SVHN, CIFAR-100 not run at this scale"
    assert out["ours"] == "3/3 pairs hold, 6 not run at this scale"
    assert out["in_paper"] == "8/9 pairs hold"  # the whole claim, as its text counts it
    # every pair ran: the verdict is the plain one
    payloads = {"p_t1": {"cells": ran + left}}
    out = T.evaluate_claim(CLAIM, payloads, {"p_t1": frame(ran + left, ours_wins)})
    assert out["result"] == "reproduced" and out["scope"] == ""
    assert out["in_paper"] == "8/9 pairs hold"


def test_a_claim_whose_pairs_all_sit_outside_the_scale_is_not_tested():
    left = [cell(d, m, 70.0) for d in ("svhn", "c100") for m in ("ours", "fedavg")]
    out = T.evaluate_claim(CLAIM, {"p_t1": {"cells": [], "left_out": left}},
                           {"p_t1": frame([], ours_wins)})
    assert out["result"] == "not tested at this scale"
    assert out["ours"] == "2 pairs not run at this scale"
    assert out["in_paper"] == "0/2 pairs hold"


def test_a_model_near_chance_narrows_the_verdict_to_the_other_model():
    cells = [cell(d, m, 70.0, model) for d in DATASETS for model in ("m1", "m2")
             for m in ("ours", "fedavg")]
    near = frame(cells, ours_wins, near=lambda labels: labels["model"] == "m2")
    out = T.evaluate_claim(CLAIM, {"p_t1": {"cells": cells}}, {"p_t1": near})
    assert f"{out['result']} {out['scope']}" == (
        "reproduced on ConvNet only; ResNet-18 near chance at this scale")
    assert out["ours"] == "3/3 pairs hold, 3 near chance (not compared)"


def test_one_baseline_near_chance_is_named_among_the_baselines():
    """The cells a claim compares against (every baseline) are part of a pair's key: one of
    them near chance narrows the verdict to the others."""
    claim = {**CLAIM, "than": {"table": "t1", "where": {"method": ["fedavg", "prox"]}}}
    cells = [cell(d, m, 70.0) for d in DATASETS for m in ("ours", "fedavg", "prox")]
    near = frame(cells, ours_wins, near=lambda labels: labels["method"] == "prox")
    out = T.evaluate_claim(claim, {"p_t1": {"cells": cells}}, {"p_t1": near})
    assert f"{out['result']} {out['scope']}" == (
        "reproduced on FedAvg only; FedProx near chance at this scale")


def test_scattered_gaps_are_counted_rather_than_named():
    """Pairs compared that are not all those of some labels' values: the verdict counts."""
    key = lambda d, m: (("dataset", d), ("model", m))  # noqa: E731
    compared = [key("c10", "m1"), key("svhn", "m2")]
    untested = [(key("c10", "m2"), NEAR_CHANCE), (key("svhn", "m1"), NOT_RUN)]
    shown = {("dataset", "c10"): "CIFAR-10", ("dataset", "svhn"): "SVHN"}
    assert scope(compared, untested, shown) == (
        "on 2 of 4 pairs; 1 near chance at this scale, 1 not run at this scale")
    assert scope(compared, [], shown) == "" and scope([], untested, shown) == ""


def test_two_narrowed_labels_and_mixed_reasons():
    key = lambda d, m: (("dataset", d), ("model", m))  # noqa: E731
    compared = [key("c10", "m1")]
    untested = [(key("c10", "m2"), NOT_RUN), (key("svhn", "m1"), NEAR_CHANCE),
                (key("svhn", "m2"), NOT_RUN)]
    shown = {("dataset", "c10"): "CIFAR-10", ("dataset", "svhn"): "SVHN",
             ("model", "m1"): "ConvNet", ("model", "m2"): "ResNet-18"}
    assert scope(compared, untested, shown) == (
        "on CIFAR-10 and ConvNet only; SVHN near chance or not run at this scale; "
        "ResNet-18 not run at this scale")


def test_settings_with_commas_are_told_apart():
    key = lambda s: (("setting", s),)  # noqa: E731
    shown = {("setting", "a"): "α=0.1, E=1", ("setting", "b"): "α=0.05, E=1",
             ("setting", "c"): "α=0.1, E=5"}
    assert scope([key("a")], [(key("b"), NOT_RUN), (key("c"), NOT_RUN)], shown) == (
        "on (α=0.1, E=1) only; (α=0.05, E=1), (α=0.1, E=5) not run at this scale")


# ----------------------------------------------------------------------------- the papers' claims


@pytest.fixture(scope="module")
def demo():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = []
    return X.load_experiment({**cfg, "scale": "demo"}, ROOT)


def claim_of(exp, paper: str, words: str) -> dict:
    return next(c for c in exp.claims() if c["paper"] == paper and words in c["text"])


def scorecard_row(exp, claim, ours) -> dict:
    """The claim checked as the scorecard job does, every run of ours from `ours(labels)`."""
    targets = {f"{claim['paper']}_{claim[s]['table']}" for s in ("better", "than")}
    payloads = {t: exp.items[t].claim_payload() for t in targets}
    frames = {}
    for t in targets:
        cells = payloads[t]["cells"]
        frames[t] = pd.DataFrame([{
            "row": c["row"], "column": c["column"], "metric": m,
            "paper_value": T.parse_reference(c["reference"].get(m))[0],
            "our_mean": ours(c["labels"]), "status": T.OK, "near_chance": False}
            for c in cells for m in c["metrics"]])
    return T.evaluate_claim(claim, payloads, frames)


def test_vhl_svhn_counts_the_papers_whole_table_as_its_text_does(demo):
    """VHL Table 4's claim says 15 of 16 in the paper: the paper column counts all 16 pairs
    though the demo runs one of the four FL settings, and the verdict names that setting."""
    claim = claim_of(demo, "vhl", "on SVHN")
    assert "15 of 16" in claim["text"]
    out = scorecard_row(demo, claim, lambda labels: 60.0 if labels["method"] == "vhl" else 50.0)
    assert out["in_paper"] == "15/16 pairs hold"
    assert out["ours"] == "4/4 pairs hold, 12 not run at this scale"
    assert f"{out['result']} {out['scope']}" == (
        "reproduced on (α=0.1, E=1, K=10) only; (α=0.05, E=1, K=10), (α=0.1, E=5, K=10), "
        "(α=0.1, E=1, K=100) not run at this scale")
    # the demo ran SVHN's stand-in, and the verdict says so
    assert out["ran_on"] == (
        "colour handwritten digits (16 px, 240 training images a class) standing in for SVHN")


def test_fedbr_every_dataset_says_only_cifar10_ran(demo):
    claim = claim_of(demo, "fedbr", "on every dataset")
    out = scorecard_row(demo, claim, lambda labels: 60.0 if labels["method"] == "fedbr" else 50.)
    # one pair at this scale: no verdict
    assert out["result"] == "not enough evidence" and out["ours"].startswith("1/1 pairs hold")
    assert out["scope"].startswith("on CIFAR-10 only; ")
    assert out["scope"].endswith(" not run at this scale")
    left = {c["display"]["dataset"] for c in demo.items["fedbr_t1"].left_out}
    assert left and "CIFAR-10" not in left
    assert all(name in out["scope"] for name in left)


def test_restricted_notes_name_what_runs_and_what_does_not_in_plain_words(demo):
    for item in demo.items.values():
        note = item.spec.get("scale_note", "")
        assert "config/" not in note and "restrict" not in note, (item.target, note)
    assert demo.items["fedbr_t1"].spec["scale_note"].startswith(
        "At this scale only CIFAR-10 (1 of ")
    assert "not run here: " in demo.items["fedbr_t1"].spec["scale_note"]
    assert demo.items["vhl_t2"].spec["scale_note"] == (
        "At this scale only (α=0.1, E=1, K=10) (1 of 5) run; not run here: (α=0.05, E=1, K=10), "
        "(α=0.1, E=5, K=10), (α=0.1, E=1, K=100), (centralized).")
    assert demo.items["vhl_t1"].left_out == []  # not restricted: every cell runs


def test_the_scorecard_page_prints_the_part_tested_after_the_verdict():
    from fedhet.tables import scorecard

    rows = [{"paper": "fedbr", "claim": "FedBR beats FedAvg on every dataset",
             "result": "reproduced", "scope": "on CIFAR-10 only; PACS not run at this scale",
             "ours": "3/3 pairs hold, 1 not run at this scale", "in_paper": "2/2 pairs hold",
             "require": "all", "rule": "needs every pair (the claim says “every”)"}]
    html = scorecard.render_html(rows, "demo", 1, "Not comparable.")
    assert ("reproduced</span><br>on CIFAR-10 only; PACS not run at this scale<br>"
            "<i>needs every pair (the claim says “every”)</i></td>") in html
    assert "“not tested at this scale”" in scorecard.LEGEND
    md = scorecard.render_markdown(rows, "demo", 1, "Not comparable.")
    assert ("**reproduced** on CIFAR-10 only; PACS not run at this scale (needs every pair "
            "(the claim says “every”))") in md


def test_a_label_that_only_rides_along_is_not_named():
    """The part left out differs in two labels (another backbone on CIFAR-100, FedBR Table 3):
    the dataset alone tells it apart, so the verdict names the dataset only."""
    key = lambda b, d: (("backbone", b), ("dataset", d))  # noqa: E731
    shown = {("backbone", "plain"): "-", ("backbone", "mixup"): "Mixup",
             ("dataset", "c10"): "CIFAR-10", ("dataset", "c100"): "CIFAR-100"}
    assert scope([key("plain", "c10")], [(key("mixup", "c100"), NOT_RUN)], shown) == (
        "on CIFAR-10 only; CIFAR-100 not run at this scale")

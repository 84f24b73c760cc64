"""Table maths (fedhet.tables): rounds to target, speed-up, Nan handling, the long CSV schema,
rendering and claim checks."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from fedhet import tables as T
from table_helpers import curve, demo_experiment, result, small_payload

ROOT = Path(__file__).resolve().parents[1]
nan = math.nan


# ----------------------------------------------------------------------------- per-run maths


def test_rounds_to_target_is_the_first_round_reaching_it():
    c = curve(10.0, 50.0, 78.99, 79.0, 85.0, 60.0)
    assert T.rounds_to_target(c, 79) == 4  # reaching exactly counts
    assert T.rounds_to_target(c, 50) == 2
    assert T.rounds_to_target(list(reversed(c)), 79) == 4  # order of records does not matter
    assert math.isnan(T.rounds_to_target(c, 85.01))  # never reached → NaN
    assert math.isnan(T.rounds_to_target(c, nan))  # no target → NaN
    assert math.isnan(T.rounds_to_target([], 10))


def test_rounds_skip_nan_accuracies():
    assert T.rounds_to_target(curve(nan, 90.0), 80) == 2


def test_speedup_is_reference_rounds_over_method_rounds():
    # VHL Table 1, α=0.1 E=1 K=10: FedAvg w/o VHL needs 287 rounds
    assert round(T.speedup(287, 188), 1) == 1.5  # FedProx w/o VHL, printed 1.5
    assert round(T.speedup(287, 128), 1) == 2.2  # FedAvg w/ VHL, printed 2.2
    assert round(T.speedup(287, 351), 1) == 0.8  # FedNova w/o VHL, printed 0.8
    assert T.speedup(287, 287) == 1.0
    assert math.isnan(T.speedup(287, nan))  # method never reached the target
    assert math.isnan(T.speedup(nan, 100))  # reference never reached it
    assert math.isnan(T.speedup(100, 0))


def test_target_from_best_rounds_down_like_the_papers():
    # the printed targets are FedAvg's best accuracy without the method, floored
    for best, target in ((79.98, 79), (69.02, 69), (84.79, 84), (49.61, 49), (90.11, 90)):
        assert T.target_from_best(best) == target
    assert T.target_from_best(80.0) == 80
    assert math.isnan(T.target_from_best(nan))


def test_mean_std_over_seeds():
    m, s, n = T.mean_std([80.0, 82.0, 84.0])
    assert (m, n) == (82.0, 3) and s == pytest.approx(2.0)
    m, s, n = T.mean_std([80.0])
    assert m == 80.0 and math.isnan(s) and n == 1
    m, s, n = T.mean_std([80.0, nan])  # one diverged seed → Nan, as the papers print it
    assert math.isnan(m) and n == 2
    assert T.mean_std([80.0, nan], nan_if_any=False)[0] == 80.0


def test_reference_values_parse():
    assert T.parse_reference(79.98) == (79.98, None)
    assert math.isnan(T.parse_reference("Nan")[0])
    assert T.parse_reference(None) == (None, None)
    assert T.parse_reference([83.65, 2.03]) == (83.65, 2.03)


def test_diverged_run_has_no_accuracy(tmp_path):
    (tmp_path / "final.json").write_text(
        '{"status": "diverged", "best_acc": 0.4, "last_acc": null, "top5_mean_acc": 0.3,'
        ' "diverged_round": 7}'
    )
    (tmp_path / "metrics.jsonl").write_text(
        '{"round": 1, "test_acc": 0.2}\n{"round": 2, "test_acc": 0.4}\n'
    )
    r = T.load_run(tmp_path)
    assert r.status == "diverged" and math.isnan(r.best_acc)
    assert r.curve == [(1, 20.0), (2, 40.0)]


# ----------------------------------------------------------------------------- tables




@pytest.fixture(scope="module")
def demo():
    return demo_experiment()


def fake_results(item, shape):
    """Every run of an item gets a curve from shape(labels)."""
    out = {}
    for cell in item.cells:
        for rid in cell.run_ids:
            accs, status = shape(cell.labels)
            out[rid] = result(
                max([a for a in accs if not math.isnan(a)], default=nan), accs, status
            )
    return out


def test_vhl_table_rounds_speedup_and_nan(demo):
    item = demo.items["vhl_t1"]
    finals = {"fedavg": 60.9, "fedprox": 70.0, "scaffold": 50.0, "fednova": 60.0}

    def shape(labels):
        if labels["setting"] == "centralized":
            return [50.0, 90.0], "completed"
        if labels["setting"] == "a01-e1-k100" and labels["algorithm"] == "fednova":
            return [10.0, nan], "diverged"
        top = finals[labels["algorithm"]]
        return [top * 0.5, top * 0.9, top, top], "completed"

    lines = T.compute_table(item.payload(), fake_results(item, shape), "demo")
    by = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    row = "α=0.1, E=1, K=10 · "
    # our target: FedAvg w/o VHL's best (60.9), floored
    target = by[("α=0.1, E=1, K=10", "target", "target")]
    assert target["our_mean"] == 60 and target["paper_value"] == 79
    assert by[(row + "FedAvg", "w/o VHL", "rounds")]["our_mean"] == 3
    assert by[(row + "FedProx", "w/o VHL", "rounds")]["our_mean"] == 2  # 63.0 ≥ 60 at round 2
    assert by[(row + "FedProx", "w/o VHL", "speedup")]["our_mean"] == pytest.approx(1.5)
    scaffold = by[(row + "SCAFFOLD", "w/o VHL", "rounds")]
    assert math.isnan(scaffold["our_mean"]) and scaffold["status"] == T.NEVER
    assert math.isnan(by[(row + "SCAFFOLD", "w/o VHL", "speedup")]["our_mean"])
    # accuracy: paper / ours / delta
    acc = by[(row + "FedAvg", "w/o VHL", "acc")]
    assert acc["paper_value"] == 79.98 and acc["our_mean"] == pytest.approx(60.9)
    assert acc["delta"] == pytest.approx(60.9 - 79.98)
    # rounds are not comparable with the paper's below paper scale: no delta
    assert math.isnan(by[(row + "FedAvg", "w/o VHL", "rounds")]["delta"])
    # pending VHL cells keep the paper's value, no number of ours
    vhl = by[(row + "FedAvg", "w/ VHL", "acc")]
    assert vhl["status"] == T.PENDING and vhl["paper_value"] == 87.82
    assert math.isnan(vhl["our_mean"])
    # diverged run: Nan accuracy, Nan rounds
    div = by[("α=0.1, E=1, K=100 · FedNova", "w/o VHL", "acc")]
    assert div["status"] == T.DIVERGED and math.isnan(div["our_mean"])
    assert by[("α=0.1, E=1, K=100 · FedNova", "w/o VHL", "rounds")]["status"] == T.DIVERGED
    # centralized row
    assert by[("centralized training", "w/o VHL", "acc")]["our_mean"] == 90.0


def test_paper_scale_uses_the_printed_target(demo):
    item = demo.items["vhl_t1"]
    res = fake_results(item, lambda labels: ([70.0, 78.5, 79.2, 80.0], "completed"))
    lines = T.compute_table(item.payload(), res, "paper")
    by = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    assert by[("α=0.1, E=1, K=10", "target", "target")]["our_mean"] == 79
    assert by[("α=0.1, E=1, K=10 · FedAvg", "w/o VHL", "rounds")]["our_mean"] == 3
    # at paper scale rounds are compared with the paper: 3 - 287
    assert by[("α=0.1, E=1, K=10 · FedAvg", "w/o VHL", "rounds")]["delta"] == 3 - 287


def test_averages_and_centralized_in_fedimpro_table1(demo):
    item = demo.items["fedimpro_t1"]
    accs = {
        "a01-e1-k10": 80.0,
        "a005-e1-k10": 70.0,
        "a01-e5-k10": 60.0,
        "a01-e1-k100": 50.0,
        "centralized": 95.0,
    }
    res = fake_results(item, lambda labels: ([accs[labels["setting"]]], "completed"))
    lines = T.compute_table(item.payload(), res, "demo")
    by = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    avg = by[("CIFAR-10 · Average", "FedAvg", "acc")]
    assert avg["our_mean"] == pytest.approx(65.0) and avg["paper_value"] == 79.53
    assert by[("CIFAR-10 · Average", "FedImpro", "acc")]["status"] == T.PENDING
    assert by[("CIFAR-10", "Cent. Acc.", "acc")]["paper_value"] == 92.53
    cell = by[("CIFAR-10 · α=0.05, E=1, K=10", "SCAFFOLD", "acc")]
    assert (cell["paper_value"], cell["paper_std"]) == (33.6, 3.87)
    # laid out as the paper: the centralized accuracy in the first column of each dataset's
    # first row, and each dataset's Average row closing its block
    header, body = T.layout(lines, item.payload())
    assert header[:3] == ["", "Cent. Acc.", "FedAvg"]
    rows = [r[0] for r in body]
    block = rows.index("**CIFAR-10**")
    assert rows[block + 1:block + 6] == ["α=0.1, E=1, K=10", "α=0.05, E=1, K=10",
                                         "α=0.1, E=5, K=10", "α=0.1, E=1, K=100", "Average"]
    assert body[block + 1][1].startswith("92.53 / 95.00")
    assert body[block + 2][1] == "" and rows[block + 6] == "**FMNIST**"
    assert "CIFAR-10" not in rows and "Cent. Acc." not in " ".join(rows)


def test_csv_schema_and_markdown(tmp_path, demo):
    item = demo.items["vhl_t1"]
    res = fake_results(item, lambda labels: ([40.0, 55.5], "completed"))
    lines = T.compute_table(item.payload(), res, "demo")
    T.write_csv(lines, tmp_path / "t.csv")
    df = T.read_csv(tmp_path / "t.csv")
    assert list(df.columns) == T.SCHEMA
    assert set(df["status"]) <= {
        T.OK,
        T.PENDING,
        T.NEVER,
        T.DIVERGED,
        "ours: reference best, floored",
    }
    pending = df[df["status"] == T.PENDING]
    assert pending["our_mean"].isna().all() and len(pending) == 4 * 4 * 3 + 1
    md = T.render_markdown(lines, item.payload(), "demo")
    assert "| FedAvg | 79.98 / 55.50 (-24.48) | 87.82 / pending |" in md
    assert "**α=0.05, E=1, K=10** (target ACC: paper 69 / ours 55" in md
    html = T.render_html(lines, item.payload(), "demo")
    assert "<table" in html and "pending" in html
    # the group header is bold in HTML, with no markdown asterisks left over
    assert "<b>α=0.05, E=1, K=10</b> (target ACC: paper 69 / ours 55" in html
    assert "**" not in html


def test_settings_table_shows_the_transcribed_values(demo):
    item = demo.items["vhl_t9"]
    lines = T.compute_table(item.payload(), {}, "demo")
    assert all(ln["status"] == T.CONFIG for ln in lines)
    assert len(lines) == 4 * 4 * 2 * 4
    # the values themselves, with a legend that speaks of settings, not of results
    md = T.render_markdown(lines, item.payload(), "demo")
    assert "– /" not in md and "target never reached" not in md and "value the runs use" in md
    html = T.render_html(lines, item.payload(), "demo")
    assert "– /" not in html and "target never reached" not in html


# ----------------------------------------------------------------------------- claims


@pytest.fixture(scope="module")
def paper_grid():
    """The paper scale: every table's whole grid (the demo restricts some)."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = ["vhl", "fedimpro"]  # their cells pending, whatever is implemented
    return X.load_experiment({**cfg, "scale": "paper"}, ROOT)


def test_claims_reproduced_pending_and_failed(paper_grid):
    import pandas as pd

    payloads = {t: paper_grid.items[t].payload() for t in ("fedimpro_t1", "fedimpro_t6")}
    claim = {
        "paper": "fedimpro",
        "text": "momentum hurts",
        "metric": "acc",
        "better": {"table": "t1", "where": {"algorithm": "fedavg", "setting": "a005-e1-k10"}},
        "than": {"table": "t6", "where": {"algorithm": "fedavg", "setting": "a005-e1-k10"}},
        "require": "majority",
    }

    def frame(target, ours):
        rows = []
        for cell in payloads[target]["cells"]:
            for m in cell["metrics"]:
                ref = T.parse_reference(cell["reference"].get(m))[0]
                rows.append(
                    {
                        "row": cell["row"],
                        "column": cell["column"],
                        "metric": m,
                        "paper_value": ref,
                        "our_mean": ours(cell["labels"]),
                        "status": T.PENDING if cell["pending"] else T.OK,
                    }
                )
        return pd.DataFrame(rows)

    frames = {
        "fedimpro_t1": frame("fedimpro_t1", lambda lab: 70.0),
        "fedimpro_t6": frame("fedimpro_t6", lambda lab: 60.0),
    }
    out = T.evaluate_claim(claim, payloads, frames)
    assert out["result"] == "reproduced" and out["ours"] == "4/4 pairs hold"
    assert out["in_paper"] == "3/4 pairs hold"  # SVHN is the exception in the paper
    frames["fedimpro_t6"] = frame("fedimpro_t6", lambda lab: 80.0)
    assert T.evaluate_claim(claim, payloads, frames)["result"] == "not reproduced"
    pending = dict(
        claim,
        better={"table": "t1", "where": {"algorithm": "fedimpro"}},
        than={"table": "t1", "where": {"algorithm": "fedavg"}},
    )
    frames["fedimpro_t1"] = frame("fedimpro_t1", lambda lab: 70.0)
    assert T.evaluate_claim(pending, payloads, frames)["result"] == "not yet run"


def test_nan_loses_every_comparison():
    assert T._better(50.0, nan, "higher") and not T._better(nan, 50.0, "higher")
    assert T._better(100.0, nan, "lower") and not T._better(nan, 100.0, "lower")


def test_claim_pairs_keep_labels_both_sides_filter_alike(demo):
    """A filter both sides share (the FL settings) restricts the cells but still pairs them
    setting by setting; only the label the sides disagree on (method) is compared."""
    import pandas as pd

    payloads = {"vhl_t1": demo.items["vhl_t1"].payload()}
    rows = []
    for cell in payloads["vhl_t1"]["cells"]:
        for m in cell["metrics"]:
            rows.append(
                {
                    "row": cell["row"],
                    "column": cell["column"],
                    "metric": m,
                    "paper_value": T.parse_reference(cell["reference"].get(m))[0],
                    "our_mean": 50.0,
                    "status": T.PENDING if cell["pending"] else T.OK,
                }
            )
    settings = ["a01-e1-k10", "a005-e1-k10", "a01-e5-k10", "a01-e1-k100"]
    claim = {
        "paper": "vhl",
        "text": "t",
        "metric": "acc",
        "better": {"table": "t1", "where": {"method": "vhl", "setting": settings}},
        "than": {"table": "t1", "where": {"method": "base", "setting": settings}},
    }
    out = T.evaluate_claim(claim, payloads, {"vhl_t1": pd.DataFrame(rows)})
    assert out["result"] == "not yet run" and out["ours"] == "16 pairs pending"
    assert out["in_paper"] == "16/16 pairs hold"




# ----------------------------------------------------------------------------- metric registry


def test_every_metric_is_declared_once_with_its_header():
    headers = {name: T.METRICS.get(name).header for name in T.METRICS.names()}
    assert headers == {
        "acc": "ACC (%)",
        "last_acc": "last ACC (%)",
        "top5_acc": "top-5 mean ACC (%)",
        "local_top5_acc": "local models' ACC (%)",
        "domain_acc": "ACC (%)",
        "params_m": "Params (M)",
        "step_seconds": "time per step (s)",
        "rounds": "ROUND",
        "speedup": "speed-up",
        "cost": "samples to target (× N)",
        "lr": "lr",
        "count": "count",
        "flops": "FLOPs",
        "gain": "gain (pp)",
    }
    assert T.METRIC_NAMES == {**headers, "target": "target ACC (%)"}
    assert T.SCALE_FREE == {"acc", "last_acc", "top5_acc", "local_top5_acc", "domain_acc",
                            "speedup", "lr", "count", "flops", "gain"}
    assert T.metric_names() == [
        "acc",
        "last_acc",
        "top5_acc",
        "local_top5_acc",
        "domain_acc",
        "params_m",
        "step_seconds",
        "rounds",
        "speedup",
        "cost",
        "lr",
        "count",
        "flops",
        "gain",
    ]
    assert T.metric_names("run") == ["acc", "last_acc", "top5_acc", "local_top5_acc",
                                     "domain_acc", "params_m", "step_seconds"]
    assert T.metric_names("derived") == ["rounds", "speedup", "cost"]
    assert T.metric_names("settings") == ["lr"] and T.metric_names("posthoc") == ["gain"]
    assert T.metric_names("analytic") == ["count", "flops"]
    assert sorted(T.metric_names()) == T.METRICS.names()
    for name in T.METRICS.names():
        metric = T.METRICS.get(name)
        assert metric.name == name and metric.kind in T.KINDS and metric.source
        assert metric.compute is not None
    with pytest.raises(ValueError, match=r"unknown kind of table metric 'acc'; valid: run, "):
        T.metric_names("acc")


def test_values_print_as_their_metric_says():
    assert T.fmt(287.0, "rounds") == "287" and T.fmt(287.5, "rounds") == "287.5"
    assert T.fmt(79.0, "target") == "79"
    assert T.fmt(1.526, "speedup") == "1.53" and T.fmt(12.34, "cost") == "12.3"
    assert T.fmt(0.01, "lr") == "0.01" and T.fmt(83.651, "acc", 2.031) == "83.65±2.03"
    assert T.fmt(1.5, "not-a-metric") == "1.50"
    assert T.fmt(None, "acc") == "–" and T.fmt(nan, "acc") == "n/a"


def test_unknown_metric_names_list_the_valid_ones():
    from fedhet.registry import UnknownNameError

    valid = ("valid: acc, cost, count, domain_acc, flops, gain, last_acc, local_top5_acc, lr, "
             "params_m, rounds, speedup, step_seconds, top5_acc")
    with pytest.raises(UnknownNameError, match=f"unknown table metric 'accuracy'; {valid}"):
        T.METRICS.get("accuracy")
    payload = small_payload()
    payload["cells"][0]["metrics"] = ["acc", "accuracy"]
    with pytest.raises(ValueError, match=f"table tx: unknown table metric 'accuracy'; {valid}"):
        T.compute_table(payload, {}, "demo")
    payload["cells"][0]["metrics"] = ["lr"]
    with pytest.raises(ValueError, match="table tx: metric 'lr' is a run setting"):
        T.compute_table(payload, {}, "demo")


def test_runs_near_chance_are_marked_instead_of_compared(demo):
    """A cell whose runs end less than a tenth of the way from chance (guessing among the
    dataset's classes) to 100% carries the near-chance mark, not a difference from the paper."""
    cifar100 = demo.items["vhl_t5"]  # the stand-in has 100 classes: chance 1%, bound 10.9%
    cifar10 = demo.items["vhl_t1"]  # 10 classes: chance 10%, bound 19%
    for item, chance in ((cifar100, 1.0), (cifar10, 10.0)):
        assert {c["chance_acc"] for c in item.payload()["cells"] if c["run_ids"]} == {chance}

    def marked(item, best):
        lines = T.compute_table(item.payload(), fake_results(
            item, lambda labels: ([best / 2, best], "completed")), "demo")
        ran = [ln for ln in lines if ln["status"] in (T.OK, T.NEVER) and ln["metric"] != "target"]
        assert ran
        return {ln["near_chance"] for ln in ran}, lines

    assert marked(cifar100, 10.5)[0] == {True}
    assert marked(cifar100, 11.5)[0] == {False}
    assert marked(cifar10, 11.5)[0] == {True}
    assert marked(cifar10, 19.5)[0] == {False}
    _, lines = marked(cifar100, 6.0)
    md = T.render_markdown(lines, cifar100.payload(), "demo")
    assert "| FedAvg | 67.95 / 6.00 † |" in md and "(-61.95)" not in md
    assert "†: ours is near chance" in md
    html = T.render_html(lines, cifar100.payload(), "demo")
    assert re.search(r"<td id='cell-[^']+'>67\.95 / 6\.00 †</td>", html)
    assert "†: ours is near chance" in html
    # the CSV keeps every number, the difference included
    fedavg = next(ln for ln in lines if ln["row"].endswith("FedAvg") and ln["metric"] == "acc")
    assert fedavg["delta"] == pytest.approx(6.0 - 67.95)
    # no mark, no legend
    _, lines = marked(cifar10, 40.0)
    assert "†" not in T.render_markdown(lines, cifar10.payload(), "demo")


def test_titles_write_paper_names_as_their_authors_do(demo):
    item = demo.items["fedimpro_t1"]
    payload = item.payload()
    assert payload["paper_name"] == "FedImpro"
    res = fake_results(item, lambda labels: ([40.0, 55.5], "completed"))
    lines = T.compute_table(payload, res, "demo")
    assert T.render_markdown(lines, payload, "demo").startswith("# FedImpro ")
    assert "<h3>FedImpro " in T.render_html(lines, payload, "demo")


def test_claims_on_a_table_with_one_unnamed_column_survive_the_csv(tmp_path, demo):
    """FedImpro Table 9 has rows [algorithm] and no column axis: its cells' column is "",
    which must read back as "" (not NaN) so that the claim finds them."""
    item = demo.items["fedimpro_t9"]
    tops = {"fedavg": 60.0, "fedprox": 70.0}
    res = fake_results(item, lambda labels: ([tops.get(labels["algorithm"], 50.0)], "completed"))
    T.write_csv(T.compute_table(item.payload(), res, "demo"), tmp_path / "t9.csv")
    frame = T.read_csv(tmp_path / "t9.csv")
    assert set(frame["column"]) == {"", "target"}  # the cells and the target line
    claim = {"paper": "fedimpro", "text": "FedProx beats FedAvg, SCAFFOLD and FedNova",
             "metric": "acc", "better": {"table": "t9", "where": {"algorithm": "fedprox"}},
             "than": {"table": "t9", "where": {"algorithm": ["fedavg", "scaffold", "fednova"]}}}
    out = T.evaluate_claim(claim, {"fedimpro_t9": item.payload()}, {"fedimpro_t9": frame})
    assert out["result"] == "reproduced" and out["ours"] == "3/3 pairs hold"


def test_pairs_near_chance_are_not_compared_and_say_so(tmp_path, demo):
    """A claim on cells whose runs learnt (almost) nothing is not judged on them: written to
    the CSV and read back, the mark leaves those pairs out of the verdict."""
    import pandas as pd

    payloads = {"vhl_t1": demo.items["vhl_t1"].payload()}
    settings = ["a01-e1-k10", "a005-e1-k10"]
    claim = {"paper": "vhl", "text": "t", "metric": "acc",
             "better": {"table": "t1", "where": {"method": "vhl", "setting": settings}},
             "than": {"table": "t1", "where": {"method": "base", "setting": settings}}}

    def frame(near) -> pd.DataFrame:
        rows = []
        for cell in payloads["vhl_t1"]["cells"]:
            for m in cell["metrics"]:
                vhl = cell["labels"].get("method") == "vhl"
                rows.append({"scale": "demo", "paper": "vhl", "table": "t1", "row": cell["row"],
                             "column": cell["column"], "metric": m, "paper_value": 50.0,
                             "our_mean": 60.0 if vhl else 50.0, "our_std": nan, "seeds": 1,
                             "delta": nan, "status": T.OK, "near_chance": near(cell["labels"])})
        path = tmp_path / "t1.csv"
        T.write_csv(rows, path)
        return T.read_csv(path)

    out = T.evaluate_claim(claim, payloads, {"vhl_t1": frame(lambda lab: False)})
    assert out["result"] == "reproduced" and out["ours"].startswith("8/8 pairs hold")
    half = frame(lambda lab: lab.get("setting") == "a005-e1-k10" and lab["method"] == "base")
    out = T.evaluate_claim(claim, payloads, {"vhl_t1": half})
    assert out["result"] == "reproduced"
    assert out["ours"] == "4/4 pairs hold, 4 near chance (not compared)"
    out = T.evaluate_claim(claim, payloads, {"vhl_t1": frame(lambda lab: True)})
    assert out["result"] == "near chance at this scale"
    assert out["ours"] == "8 pairs near chance (not compared)"  # never "0/0 pairs hold"

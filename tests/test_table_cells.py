"""What a table's cells tell a reader (fedhet.tables.render): a missing number says why (not
reached, diverged), a rounds-to-target table prints our target, counts and differences share
one precision and unit, and the near-chance mark is decided for each cell on its own value."""

from __future__ import annotations

import math
import re

from fedhet import tables as T
from test_tables import demo  # noqa: F401  (the demo experiment, as the table tests load it)

nan = math.nan


def results(item, final_of):
    """Every run of `item`: final.json from final_of(labels) (accuracies as fractions) and a
    curve rising to its best accuracy."""
    out = {}
    for cell in item.cells:
        for rid in cell.run_ids:
            final = {"status": "completed", **final_of(cell.labels)}
            best = final.get("best_acc") or 0.0
            curve = [(1, 50.0 * best), (2, 100.0 * best)]
            out[rid] = T.result_from(final, curve)
    return out


def rendered(lines, payload) -> tuple[str, str]:
    return T.render_markdown(lines, payload, "demo"), T.render_html(lines, payload, "demo")


def test_a_missing_number_says_why():
    assert T.fmt(nan, "rounds", status=T.NEVER) == "not reached"
    assert T.fmt(nan, "speedup", status=T.NEVER) == "not reached"
    assert T.fmt(nan, "acc", status=T.DIVERGED) == "diverged"
    assert T.fmt(nan, "rounds", status=T.DIVERGED) == "diverged"
    # the paper's own Nan in a rounds column: its target was not reached
    assert T.fmt(nan, "rounds") == "not reached" and T.fmt(nan, "speedup") == "not reached"
    assert T.fmt(nan, "acc") == "n/a" and T.fmt(None, "acc") == "–"


def test_vhl_table_tells_not_reached_from_diverged(demo):
    item = demo.items["vhl_t1"]

    def final(labels):
        if labels["setting"] == "a01-e1-k100" and labels["algorithm"] == "fednova":
            return {"status": "diverged", "best_acc": None}
        # SCAFFOLD stays below FedAvg's best: it never reaches the target
        return {"best_acc": {"scaffold": 0.40}.get(labels["algorithm"], 0.62),
                "last_acc": 0.6, "top5_mean_acc": 0.6}

    lines = T.compute_table(item.payload(), results(item, final), "demo")
    md, html = rendered(lines, item.payload())
    cells = [r for r in md.splitlines() if r.startswith("| ")]
    assert cells and not [r for r in cells if "Nan" in r]
    assert not re.search(r"<td[^>]*>Nan", html) and "/ Nan" not in html
    row = "| FedNova | 46.53 / diverged | 61.59 / pending | not reached / diverged |"
    assert row in md
    scaffold = next(r for r in md.splitlines() if r.startswith("| SCAFFOLD"))
    assert "/ not reached" in scaffold  # our rounds: FedAvg's best is out of its reach
    assert "`not reached`: the target accuracy is not reached within the rounds run" in md
    assert "<i>not reached</i>: the target accuracy is not reached within the rounds run" in html
    assert "`diverged`: training diverged" in md and "<i>diverged</i>: training diverged" in html


def test_a_table_wide_target_is_printed(demo):
    """FedImpro Table 9's target belongs to no row or block (its rows are the algorithms): a
    line above the rows gives the paper's and ours."""
    item = demo.items["fedimpro_t9"]
    tops = {"fedavg": 0.607, "fedprox": 0.70}
    res = results(item, lambda labels: {"best_acc": tops.get(labels["algorithm"], 0.5),
                                        "last_acc": 0.5, "top5_mean_acc": 0.5})
    lines = T.compute_table(item.payload(), res, "demo")
    header, body = T.layout(lines, item.payload())
    assert body[0][0] == ("**target ACC (%)** (CIFAR-10: paper 82 / ours 60, "
                          "ours: reference best, floored)")
    md, html = rendered(lines, item.payload())
    assert "<b>target ACC (%)</b> (CIFAR-10: paper 82 / ours 60," in html
    assert "| FedProx | 82.92 / 70.00 (-12.92) | 844 / 2 |" in md
    assert "| SCAFFOLD | 82.43 / 50.00 (-32.43) | 512 / not reached |" in md


def test_counts_and_their_differences_share_a_precision_and_a_unit(demo):
    """FedLGD Table 7: parameters and values with an SI prefix at three significant digits,
    the difference too (not 173962.00)."""
    item = demo.items["fedlgd_t7"]
    lines = T.compute_table(item.payload(), {}, "demo")
    md, _ = rendered(lines, item.payload())
    resnet = next(r for r in md.splitlines() if r.startswith("| ResNet-18"))
    assert "11.0M / 11.2M (+174K)" in resnet
    rows = md.splitlines()
    body = rows[rows.index(next(r for r in rows if r.startswith("|---"))) + 1:]
    cells = [c.strip() for r in body for c in r.split("|")[2:-1]]
    number = r"\d+(?:\.\d+)?[KMG]?"
    count = re.compile(rf"{number} / {number} \([+-]{number}\)")
    assert cells and all(count.fullmatch(c) for c in cells), cells
    for c in cells:  # three significant digits everywhere
        for value in re.findall(r"[\d.]+", c):
            assert len(value.replace(".", "").lstrip("0")) <= 3, c


def test_si_counts():
    for value, text in ((311_000, "311K"), (11_000_000, "11.0M"), (11_173_962, "11.2M"),
                        (23_520, "23.5K"), (520, "520"), (50, "50.0"), (999_999, "1.00M"),
                        (2.5e9, "2.50G")):
        assert T.fmt(value, "count") == text
    assert T.cell_text({"metric": "count", "paper_value": 11e6, "our_mean": 11_173_962.0,
                        "delta": 173_962.0, "status": T.OK}) == "11.0M / 11.2M (+174K)"


def test_a_difference_is_printed_like_its_values():
    line = {"metric": "domain_acc", "paper_value": 73.0, "our_mean": 25.58, "delta": -47.42,
            "status": T.OK}
    assert T.cell_text(line) == "73.0 / 25.6 (-47.4)"
    assert T.cell_text({**line, "metric": "acc"}) == "73.00 / 25.58 (-47.42)"
    assert T.fmt(73.04, "domain_acc", 1.234) == "73.0±1.2"  # a std too


def test_the_near_chance_mark_is_decided_per_cell(demo):
    """FedLGD Table 1: one run gives a cell per client. A client at 9.7 % (chance 10 %) is
    marked, one at 60 % is not, whatever the run's best accuracy; the Average is judged on
    its own value."""
    item = demo.items["fedlgd_t1"]
    domains = {"mnist": 0.60, "svhn": 0.097, "usps": 0.50, "synthdigits": 0.40, "mnistm": 0.45}
    res = results(item, lambda labels: {"best_acc": 0.15, "last_acc": 0.15,
                                        "top5_mean_acc": 0.15, "last_domain_acc": domains,
                                        "mean_domain_acc_last": 0.4094})
    lines = T.compute_table(item.payload(), res, "demo")
    ran = [ln for ln in lines if ln["status"] == T.OK and ln["metric"] == "domain_acc"]
    assert ran
    for ln in ran:
        client = ln["column"].split(" · ")[0]
        assert ln["near_chance"] == (client == "SVHN"), ln
    md, _ = rendered(lines, item.payload())
    fedavg = next(r for r in md.splitlines() if r.startswith("| ConvNet"))
    assert "/ 9.7 †" in fedavg and "/ 60.0 (" in fedavg
    assert "/ 40.9 (" in fedavg  # the Average of the five: not near chance


def test_a_target_per_row_is_explained_under_the_legend_not_as_a_row(demo):
    item = demo.items["fedimpro_t2"]
    res = results(item, lambda labels: {"best_acc": 0.6, "last_acc": 0.5,
                                        "top5_mean_acc": 0.5})
    lines = T.compute_table(item.payload(), res, "demo")
    header, body = T.layout(lines, item.payload())
    assert not [row for row in body if row[0].startswith("target")]
    md, html = rendered(lines, item.payload())
    assert "target ACC (%): the accuracy a run must reach, paper / ours (ours is the best " \
           "accuracy of the table's reference" in md

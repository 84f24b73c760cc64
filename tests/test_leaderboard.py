"""The leaderboard's maths on synthetic results whose ranks, wins, ties, losses and left-out
settings are known by construction: ties by the seeds' spread with three seeds, by the margin
with fewer, near-chance and diverged settings left out and counted, several papers and tables,
a challenger that is best or worst, a rounds-to-target table where fewer is better and a seed
may never reach the target; and the report's rendering of it."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from fedhet.leaderboard import ranking as L
from fedhet.leaderboard.ranking import build_leaderboard, legend, readable, render_html

NAN = math.nan
CHANCE = 10.0  # ten classes: near chance below 10 + 0.1 · 90 = 19


def cell(paper: str, table: str, setting: str, method: str, values: list[float], *,
         chance: float = CHANCE, paper_value: float = NAN, flops: float = 1e12,
         nbytes: float = 4e6, seconds: float = 10.0, diverged: bool = False) -> list[dict]:
    """The runs of one cell, one per value (seed 0, 1, ...), scored on accuracy; a NaN value is
    a diverged run, and so is the last when `diverged` (a value kept from before it
    diverged)."""
    runs = [
        {"paper": paper, "table": table, "setting": setting, "method": method,
         "label": method.upper(), "seed": seed, "value": value,
         "status": "diverged" if math.isnan(value) else "completed", "chance": chance,
         "paper_value": paper_value, "metric": "acc", "lower_is_better": False,
         "train_flops": flops * (seed + 1), "bytes_per_round": nbytes, "seconds": seconds}
        for seed, value in enumerate(values)
    ]
    if diverged:
        runs[-1]["status"] = "diverged"
    return runs


def rounds_cell(setting: str, method: str, values: list[float]) -> list[dict]:
    """The runs of one cell of a rounds-to-target table (FedImpro Table 2): each seed's rounds
    to the target, fewer is better; a NaN value is a seed that never reached it."""
    runs = cell("fedimpro", "2", setting, method, values, chance=10.0)
    for run in runs:
        run.update(metric="rounds", lower_is_better=True,
                   status="never reached" if math.isnan(run["value"]) else "completed")
    return runs


def frame(*cells: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([run for runs in cells for run in runs])


def row(board: pd.DataFrame, paper: str, table: str, method: str) -> pd.Series:
    found = board[(board.paper == paper) & (board.table == table) & (board.method == method)]
    assert len(found) == 1, f"{paper} {table} {method}: {len(found)} rows"
    return found.iloc[0]


def wtl(r: pd.Series) -> tuple[int, int, int, int]:
    return int(r.wins), int(r.ties), int(r.losses), int(r.excluded)


# VHL-like table, three seeds: ties are judged by the seeds' spread (a margin of 0.5 would
# decide s2 and the fedprox s3 otherwise)
SPREAD = frame(
    cell("vhl", "1", "s1", "fedavg", [49, 50, 51]), cell("vhl", "1", "s1", "mine", [51, 52, 53]),
    cell("vhl", "1", "s1", "fedprox", [39, 40, 41]),
    # fedavg's spread 2 covers the difference 1.5: a tie
    cell("vhl", "1", "s2", "fedavg", [48, 50, 52]),
    cell("vhl", "1", "s2", "mine", [50.5, 51.5, 52.5]),
    cell("vhl", "1", "s2", "fedprox", [50, 51, 52]),
    # a difference of exactly the spread (1) is a tie
    cell("vhl", "1", "s3", "fedavg", [59, 60, 61]), cell("vhl", "1", "s3", "mine", [54, 55, 56]),
    cell("vhl", "1", "s3", "fedprox", [53, 54, 55]),
    # the challenger near chance (15 < 19): left out against every method
    cell("vhl", "1", "s4", "fedavg", [30, 31, 32]), cell("vhl", "1", "s4", "mine", [14, 15, 16]),
    cell("vhl", "1", "s4", "fedprox", [30, 30, 30]),
    # fedavg diverged in one seed: left out against fedavg only
    cell("vhl", "1", "s5", "fedavg", [40, NAN, 40]), cell("vhl", "1", "s5", "mine", [69, 70, 71]),
    cell("vhl", "1", "s5", "fedprox", [64, 65, 66]),
)


def test_three_seeds_tie_within_the_spread_and_exclusions_are_counted():
    board = build_leaderboard(SPREAD, "mine", tie_margin=0.5)
    assert list(board.method) == ["fedavg", "fedprox"]  # no row for the challenger itself
    fedavg = row(board, "vhl", "1", "fedavg")
    assert wtl(fedavg) == (1, 1, 1, 2)  # s1 win, s2 tie, s3 loss; s4, s5 left out
    assert fedavg.ours == pytest.approx((50 + 50 + 60) / 3)
    assert fedavg.challenger == pytest.approx((52 + 51.5 + 55) / 3)
    fedprox = row(board, "vhl", "1", "fedprox")
    assert wtl(fedprox) == (2, 2, 0, 1)  # s1, s5 wins; s2, s3 ties; s4 left out
    assert fedprox.ours == pytest.approx((40 + 51 + 54 + 65) / 4)
    assert fedprox.challenger == pytest.approx((52 + 51.5 + 55 + 70) / 4)
    # fedavg beats the challenger on their settings, fedprox does not
    assert (board["rank"] == 2).all() and (board["ranked"] == 3).all()
    assert fedavg.label == "FEDAVG"


def test_a_cell_near_chance_or_diverged_on_the_method_side_is_left_out_too():
    results = frame(cell("vhl", "1", "s1", "a", [18.9]), cell("vhl", "1", "s1", "mine", [60]),
                    cell("vhl", "1", "s2", "a", [19.1]), cell("vhl", "1", "s2", "mine", [60]),
                    # chance 50 (two classes): 54 is near chance, 56 is not
                    cell("vhl", "1", "s3", "a", [54], chance=50.0),
                    cell("vhl", "1", "s3", "mine", [56], chance=50.0),
                    # no chance level known: never near chance
                    cell("vhl", "1", "s4", "a", [1], chance=NAN),
                    cell("vhl", "1", "s4", "mine", [2], chance=NAN),
                    # a diverged run, whatever value it reports, leaves its setting out
                    cell("vhl", "1", "s5", "a", [70, 90], diverged=True),
                    cell("vhl", "1", "s5", "mine", [60, 60]))
    assert wtl(row(build_leaderboard(results, "mine", tie_margin=0.5), "vhl", "1", "a")) == \
        (2, 0, 0, 3)


def test_fewer_than_three_seeds_tie_within_the_margin():
    results = frame(
        # two seeds each: 0.4 within the margin, a tie although the spreads are wide
        cell("fedbr", "3", "s1", "a", [69, 71]), cell("fedbr", "3", "s1", "mine", [70.4, 70.4]),
        # difference 1 over the margin: a win although a's spread (1.41) covers it
        cell("fedbr", "3", "s2", "a", [60, 62]), cell("fedbr", "3", "s2", "mine", [62, 62]),
        # one seed each
        cell("fedbr", "3", "s3", "a", [80]), cell("fedbr", "3", "s3", "mine", [79.7]),
        cell("fedbr", "3", "s4", "a", [80]), cell("fedbr", "3", "s4", "mine", [78]),
        # three seeds against two: the margin decides (the spread 1 would tie)
        cell("fedbr", "3", "s5", "a", [49, 50, 51]), cell("fedbr", "3", "s5", "mine", [50.8, 50.8]),
    )
    assert wtl(row(build_leaderboard(results, "mine", tie_margin=0.5), "fedbr", "3", "a")) == \
        (2, 2, 1, 0)
    # a wider margin turns the win of s2 and s5 and the loss of s4 into ties
    assert wtl(row(build_leaderboard(results, "mine", tie_margin=2.0), "fedbr", "3", "a")) == \
        (0, 5, 0, 0)


def test_ranks_per_table_over_papers_and_tables():
    methods = {"a": 60, "b": 50, "c": 40}
    results = frame(
        # FedImpro Table 1: the challenger best
        *[cell("fedimpro", "1", s, m, [v + k]) for m, v in methods.items() for k, s in
          enumerate(["x", "y"])],
        *[cell("fedimpro", "1", s, "mine", [70 + k]) for k, s in enumerate(["x", "y"])],
        # FedImpro Table 2: the challenger worst
        *[cell("fedimpro", "2", "x", m, [v]) for m, v in methods.items()],
        cell("fedimpro", "2", "x", "mine", [30]),
        # CCVR Table 1: the challenger between b and c, and absent from one setting (not counted)
        *[cell("ccvr", "1", "x", m, [v]) for m, v in methods.items()],
        cell("ccvr", "1", "x", "mine", [45]), cell("ccvr", "1", "z", "a", [10]),
        # a table without the challenger: no rows
        *[cell("ccvr", "2", "x", m, [v]) for m, v in methods.items()],
    )
    board = build_leaderboard(results, "mine", tie_margin=0.5)
    assert list(zip(board.paper, board.table)) == [("fedimpro", "1")] * 3 + \
        [("fedimpro", "2")] * 3 + [("ccvr", "1")] * 3
    ranks = board.groupby(["paper", "table"], sort=False)["rank"]
    assert (ranks.nunique() == 1).all()  # one rank per table, on each of its rows
    assert ranks.first().to_dict() == {("fedimpro", "1"): 1, ("fedimpro", "2"): 4,
                                       ("ccvr", "1"): 3}
    assert (board["ranked"] == 4).all()
    assert wtl(row(board, "fedimpro", "1", "c")) == (2, 0, 0, 0)
    assert wtl(row(board, "fedimpro", "2", "a")) == (0, 0, 1, 0)
    assert wtl(row(board, "ccvr", "1", "a")) == (0, 0, 1, 0)  # z: the challenger did not run
    assert wtl(row(board, "ccvr", "1", "c")) == (1, 0, 0, 0)


def test_a_challenger_compared_with_no_one_has_no_rank():
    results = frame(cell("fedlgd", "1", "x", "a", [60]), cell("fedlgd", "1", "x", "mine", [12]),
                    cell("fedlgd", "1", "x", "b", [NAN]))
    board = build_leaderboard(results, "mine", tie_margin=0.5)
    assert board["rank"].isna().all() and board["ranked"].isna().all()
    assert wtl(row(board, "fedlgd", "1", "b")) == (0, 0, 0, 1)
    assert math.isnan(row(board, "fedlgd", "1", "a").ours)


def test_paper_values_and_costs_are_means_over_the_same_settings():
    results = frame(
        cell("vhl", "2", "s1", "a", [50, 52], paper_value=55.0, flops=2e12, nbytes=8e6,
             seconds=20.0),
        cell("vhl", "2", "s1", "mine", [53, 53], flops=1e12, nbytes=4e6, seconds=12.0),
        cell("vhl", "2", "s2", "a", [60, 60], paper_value=65.0, flops=2e12, nbytes=8e6,
             seconds=30.0),
        cell("vhl", "2", "s2", "mine", [61, 61], flops=3e12, nbytes=4e6, seconds=14.0),
        # near chance: left out of the results but its runs cost as much
        cell("vhl", "2", "s3", "a", [12, 12], flops=2e12, nbytes=8e6, seconds=40.0),
        cell("vhl", "2", "s3", "mine", [55, 55], flops=2e12, nbytes=4e6, seconds=16.0),
        # the paper prints no number for b in s2: no mean of the paper's numbers
        cell("vhl", "2", "s1", "b", [40], paper_value=45.0),
        cell("vhl", "2", "s2", "b", [40]),
    )
    board = build_leaderboard(results, "mine", tie_margin=0.5)
    a = row(board, "vhl", "2", "a")
    assert a.paper_value == pytest.approx(60.0) and a.ours == pytest.approx(55.5)
    # per run: seed k does (k + 1) × the cell's flops
    assert a.train_flops == pytest.approx(2e12 * 1.5)
    assert a.challenger_train_flops == pytest.approx((1e12 + 3e12 + 2e12) * 1.5 / 3)
    assert (a.bytes_per_round, a.challenger_bytes_per_round) == (8e6, 4e6)
    assert (a.seconds, a.challenger_seconds) == pytest.approx((30.0, 14.0))
    assert math.isnan(row(board, "vhl", "2", "b").paper_value)


def test_rounds_to_target_fewer_is_better_and_never_reaching_loses():
    results = frame(
        # one seed each, margin 1: 20 vs 30 a win, 41 vs 40 a tie, 50 vs 40 a loss
        rounds_cell("s1", "a", [30]), rounds_cell("s1", "mine", [20]),
        rounds_cell("s2", "a", [40]), rounds_cell("s2", "mine", [41]),
        rounds_cell("s3", "a", [40]), rounds_cell("s3", "mine", [50]),
        # a never reached: mine wins although it took many rounds (15 rounds: no near chance)
        rounds_cell("s4", "a", [NAN]), rounds_cell("s4", "mine", [15]),
        # both never reached in one seed: a tie; b never reached s1
        rounds_cell("s5", "a", [10, NAN]), rounds_cell("s5", "mine", [NAN, 12]),
        rounds_cell("s1", "b", [NAN]), rounds_cell("s2", "b", [35]),
    )
    board = build_leaderboard(results, "mine", tie_margin=1.0)
    a = row(board, "fedimpro", "2", "a")
    assert wtl(a) == (2, 2, 1, 0)
    # means over the settings both reached: s1, s2, s3
    assert a.ours == pytest.approx((30 + 40 + 40) / 3)
    assert a.challenger == pytest.approx((20 + 41 + 50) / 3)
    assert (a.metric, bool(a.lower_is_better)) == ("rounds", True)
    b = row(board, "fedimpro", "2", "b")
    assert wtl(b) == (1, 0, 1, 0)  # s1: b never reached; s2: 41 against 35
    # against a, mine never reached once and a twice; against b, mine always reached and b
    # missed once: neither beats mine, whose means are the higher (a rank by means alone: 3)
    assert (board["rank"] == 1).all() and (board["ranked"] == 3).all()
    assert readable(board, "Mine").iloc[0]["Scored on"] == "ROUND, fewer is better"


def test_a_lower_is_better_table_ranks_the_lowest_mean_first():
    results = frame(rounds_cell("x", "a", [10]), rounds_cell("x", "b", [30]),
                    rounds_cell("x", "mine", [20]))
    board = build_leaderboard(results, "mine", tie_margin=1.0)
    assert (board["rank"] == 2).all()
    assert wtl(row(board, "fedimpro", "2", "a")) == (0, 0, 1, 0)
    assert wtl(row(board, "fedimpro", "2", "b")) == (1, 0, 0, 0)


@pytest.mark.parametrize("change, message", [
    (lambda r: r.drop(columns=["chance", "seconds"]), "results lack column(s) chance, seconds"),
    (lambda r: r.assign(status="crashed"), "unknown run status 'crashed'"),
    (lambda r: pd.concat([r, r.iloc[:1]]), "results hold a run twice: paper=vhl, table=1"),
    (lambda r: r.assign(lower_is_better=r["seed"] == 0),
     "table 1 of vhl is scored on more than one metric or direction"),
])
def test_bad_results_are_refused_with_what_to_fix(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_leaderboard(change(SPREAD), "mine", tie_margin=0.5)


def test_an_unknown_challenger_or_margin_is_refused():
    with pytest.raises(ValueError, match="challenger 'theirs' has no results; methods present: "
                                         "fedavg, fedprox, mine"):
        build_leaderboard(SPREAD, "theirs", tie_margin=0.5)
    for margin in (-0.1, NAN):
        with pytest.raises(ValueError, match="tie_margin is .*; give a finite number >= 0"):
            build_leaderboard(SPREAD, "mine", tie_margin=margin)


def test_the_report_table_reads_as_the_legend_says():
    board = build_leaderboard(SPREAD, "mine", tie_margin=0.5)
    table = readable(board, "Mine")
    assert list(table.columns[:8]) == ["Paper", "Table", "Scored on", "Method", "Ours",
                                       "In the paper", "Mine", "Rank of Mine"]
    assert table.iloc[0]["Scored on"] == "ACC (%)"
    first = table.iloc[0]
    assert (first.Paper, first.Method, first.Ours, first["In the paper"], first.Mine) == \
        ("VHL", "FEDAVG", "53.33", "–", "52.83")
    assert first["Rank of Mine"] == "2 of 3"
    assert first["Wins / ties / losses"] == "1 / 1 / 1" and first["Left out"] == "2"
    # five settings, three seeds with 1, 2, 3 × 1e12: 2T per run for both
    assert first["Training work, Mine / method"] == "2.00T / 2.00T"
    assert first["Bytes per round, Mine / method"] == "4.00M / 4.00M"
    assert readable(board, "Mine", digits=1).iloc[0].Ours == "53.3"
    text = legend("Mine", 0.5)
    assert "within 0.5" in text and "3 or more seeds" in text and "10% of the way" in text
    page = render_html(board, "Mine", 0.5, "demo")
    assert page.count("<tr>") == 3 and "within 0.5" in page and "53.33" in page


# ----------------------------------------------------------------------------- entries


def _entry(name: str, label: str, weight: float, **more) -> dict:
    return {"name": name, "label": label, "method": "mine", "kind": "plugin",
            "package": "mine-fl", "version": "0.3", "source": "0123456789abcdef",
            "source_covers": "sha256 0123456789abcdef of 4 files: the files its RECORD lists",
            "settings": f"plug-in mine(weight={weight})", "settings_per_paper": {}, **more}


def _renamed(results: pd.DataFrame, name: str) -> pd.DataFrame:
    out = results.copy()
    out.loc[out["method"] == "mine", "method"] = name
    return out


def test_every_row_of_a_leaderboard_says_what_its_challenger_is():
    board = build_leaderboard(SPREAD, "mine", tie_margin=0.5)
    entry = _entry("mine-a", "Mine A", 0.1, settings_per_paper={"vhl": "plug-in mine(weight=1)"})
    rows = L.with_entry(board, entry)
    assert list(rows.columns[:8]) == L.ENTRY_COLUMNS
    assert (rows["entry_source"] == "0123456789abcdef").all()
    assert (rows["entry_package"] == "mine-fl").all() and (rows["entry_version"] == "0.3").all()
    assert (rows["entry_settings"] == "plug-in mine(weight=1)").all()  # VHL's own settings
    assert rows[board.columns].equals(board)
    assert L.with_entry(rows, entry).equals(rows)  # read back and given again: once
    page = L.render_markdown(board, "Mine A", 0.5, "demo", entry=entry)
    assert "- Entry mine-a (Mine A): plug-in mine of mine-fl 0.3" in page
    assert "sha256 0123456789abcdef of 4 files" in page
    assert "Settings in VHL's tables: plug-in mine(weight=1)" in page
    assert "plug-in mine of mine-fl 0.3" in render_html(board, "Mine A", 0.5, "demo", entry=entry)


def test_the_overview_puts_the_entries_of_a_sweep_side_by_side_per_table():
    a, b = _entry("mine-a", "Mine A", 0.1), _entry("mine-b", "Mine B", 1.0)
    second = frame(*[cell("fedbr", "3", "s1", m, v) for m, v in
                     (("fedavg", [60, 61, 62]), ("mine", [70, 71, 72]))])
    results_a = pd.concat([SPREAD, second], ignore_index=True)
    # B: one point better than A in table 1 (every cell), worse than fedavg in table 3
    results_b = results_a.copy()
    in_b = results_b["method"] == "mine"
    results_b.loc[in_b & (results_b["table"] == "1"), "value"] += 1
    results_b.loc[in_b & (results_b["table"] == "3"), "value"] -= 20
    parts = []
    for entry, results in ((a, results_a), (b, results_b)):
        results = _renamed(results, entry["name"])
        board = build_leaderboard(results, entry["name"], tie_margin=0.5)
        parts.append((entry, L.with_entry(board, entry), results))
    overview = L.build_overview(parts)
    assert list(overview.columns) == L.OVERVIEW
    assert list(zip(overview["table"], overview["entry"])) == [
        ("1", "mine-a"), ("1", "mine-b"), ("3", "mine-a"), ("3", "mine-b")]
    first = overview.iloc[0]
    # A's mean over table 1's settings: each setting's mean over seeds (s5 with all three)
    assert first["mean"] == pytest.approx((52 + 51.5 + 55 + 15 + 70) / 5)
    assert overview.iloc[1]["mean"] == pytest.approx(first["mean"] + 1)
    assert (first["wins"], first["ties"], first["losses"], first["excluded"]) == (3, 3, 1, 3)
    assert (first["rank"], first["ranked"], first["methods"]) == (2, 3, 2)
    assert tuple(overview.iloc[3][["rank", "wins", "losses"]]) == (2, 0, 1)
    assert overview.iloc[1]["entry_settings"] == "plug-in mine(weight=1.0)"
    page = L.render_overview_markdown(overview, [a, b], "demo")
    assert "| VHL | 1 | ACC (%) | Mine A | mine (mine-fl 0.3 · 0123456789abcdef) | plug-in " \
           "mine(weight=0.1) |" in page
    assert "- Entry mine-b (Mine B): plug-in mine of mine-fl 0.3" in page
    assert "Mine B" in L.render_overview_html(overview, [a, b], "demo")

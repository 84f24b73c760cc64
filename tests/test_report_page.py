"""Finishing Snakemake's report page (fedhet.report): the tab title, the stylesheet, the
provenance in the landing text; the landing text's warning box; the scorecard page."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_parts
from jinja2 import Environment

from fedhet import papers
from fedhet.report import page, provenance
from fedhet.report.__main__ import settings
from fedhet.tables import scorecard

ROOT = Path(__file__).resolve().parents[1]
CSS = (ROOT / "workflow" / "report" / "report.css").read_text()


def landing_html(scale: str = "demo") -> str:
    """workflow/report/workflow.rst rendered as Snakemake renders the report's text (Jinja, then
    docutils' HTML writer)."""

    class Snakemake:
        config = {
            "scale": scale,
            "scale_warning": "Not comparable with the papers'.",
            "scale_note": "Digits stand in for CIFAR-10.",
        }

    text = Environment().from_string((ROOT / "workflow" / "report" / "workflow.rst").read_text())
    return publish_parts(text.render(snakemake=Snakemake), writer="html")["html_body"]


def snakemake_page(description: str) -> str:
    """The parts of Snakemake's report template (index.html.jinja2) that finishing touches."""
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>Snakemake Report</title>\n<style>body{margin:0}</style>\n</head>\n<body>\n"
        "<div id=\"app\">\n</div>\n<script id=\"workflow-desc\">\n"
        f"    var workflow_desc = {json.dumps(description)};\n    </script>\n"
        "<script id=\"results\">\nvar results = {};\n</script>\n</body>\n</html>\n"
    )


def description_of(html: str) -> str:
    line = re.search(r"^\s*var workflow_desc = (.*);$", html, re.M).group(1)
    return json.loads(line)


def test_the_landing_text_opens_with_its_title_and_the_scales_warning_in_a_box():
    html = landing_html()
    title = html.index("<h1")
    box = re.search(r'<div class="admonition warning">.*?</div>', html, re.S)
    assert box and "Scale demo." in box.group() and "Not comparable" in box.group()
    # the title, one paragraph on what the report is, then the box; the scorecard's verdicts
    # are counted under it once the page is finished, its table is not repeated
    assert html.count("<p>", title, box.start()) == 1
    assert "Scorecard" not in html[box.end():] and "list-table" not in html
    assert page.PLACEHOLDER.search(html)
    verdicts = page.VERDICTS.search(html)
    assert verdicts and verdicts.start() > box.end()


def test_finishing_sets_the_title_adds_the_stylesheet_and_fills_the_provenance():
    finished = page.finish(snakemake_page(landing_html()), title="fedhet report · scale demo",
                           css=CSS, provenance_html="<ul><li>commit abc</li></ul>")
    assert "<title>fedhet report · scale demo</title>" in finished
    assert "Snakemake Report" not in finished.split("</head>")[0].split("<title>")[1]
    head = finished.split("</head>")[0]
    assert head.count(f'<style id="{page.STYLE_ID}">') == 1
    assert head.rindex("<style") == head.index(f'<style id="{page.STYLE_ID}">')  # last: it wins
    text = description_of(finished)
    assert '<div class="fedhet-provenance docutils container"><ul><li>commit abc</li></ul></div>' \
        in text
    assert "not recorded" not in text


def test_finishing_twice_changes_nothing():
    once = page.finish(snakemake_page(landing_html()), title="t", css=CSS,
                       provenance_html="<ul><li>a</li></ul>")
    assert page.finish(once, title="t", css=CSS, provenance_html="<ul><li>a</li></ul>") == once


def test_finished_text_cannot_end_its_script_early():
    finished = page.finish(snakemake_page(landing_html()), title="t", css=CSS,
                           provenance_html="<ul><li>x</li></ul><script>alert(1)</script>")
    script = finished.split('<script id="workflow-desc">')[1].split("</script>")[0]
    assert "alert(1)" in script  # still inside its script element: "</" is escaped
    assert "<script>alert(1)</script>" in description_of(finished)


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.replace("<title>Snakemake Report</title>", ""), "not a Snakemake HTML report"),
    (lambda p: p.replace("var workflow_desc", "var description"), "workflow_desc"),
    (lambda p: p.replace("fedhet-provenance", "other"), "provenance placeholder"),
])
def test_a_page_of_another_layout_is_refused_with_the_reason(damage, message):
    with pytest.raises(page.ReportPageError, match=message):
        page.finish(damage(snakemake_page(landing_html())), title="t", css=CSS,
                    provenance_html="")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          capture_output=True, text=True, check=True).stdout.strip()


def write_run(runs: Path, run_id: str, commit: str | None) -> None:
    (runs / run_id).mkdir(parents=True)
    resolved = {"algorithm": {"name": "fedavg"}, "provenance": {"git_commit": commit}}
    (runs / run_id / "resolved.yaml").write_text(yaml.safe_dump(resolved))


def test_provenance_names_the_commit_a_dirty_tree_and_runs_of_other_commits(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    head = git(repo, "rev-parse", "HEAD")
    runs = repo / "results" / "demo" / "runs"
    write_run(runs, "r-same", head)
    write_run(runs, "r-old-1", "0" * 40)
    write_run(runs, "r-old-2", "0" * 40)
    write_run(runs, "r-none", None)
    when = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)

    clean = provenance.collect(repo, runs, "demo", [0, 1], now=when)
    assert (clean.commit, clean.dirty) == (head, False)
    assert clean.other_commits == {"0" * 40: ["r-old-1", "r-old-2"], "none recorded": ["r-none"]}
    html = provenance.to_html(clean)
    for text in (head, "2026-01-02 03:04 UTC", "seeds 0, 1", "Scale <b>demo</b>",
                 "3 run(s)", "r-old-1, r-old-2", "r-none"):
        assert text in html
    assert "uncommitted" not in html

    (repo / "a.txt").write_text("two")
    dirty = provenance.collect(repo, runs, "demo", [0], now=when)
    assert dirty.dirty and "uncommitted changes" in provenance.to_html(dirty)


def test_provenance_outside_a_checkout_and_with_every_run_of_this_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # git looks no higher
    runs = tmp_path / "runs"
    runs.mkdir()
    p = provenance.collect(tmp_path, runs, "small", [0])
    assert (p.commit, p.dirty, p.other_commits) == (None, False, {})
    assert "unknown commit" in provenance.to_html(p)
    write_run(runs, "r", "0" * 40)
    assert provenance.collect(tmp_path, runs, "small", [0]).other_commits == {"0" * 40: ["r"]}


@pytest.mark.repo_state  # git in the repository
def test_provenance_says_when_every_run_is_of_this_commit(tmp_path):
    p = provenance.collect(ROOT, tmp_path, "demo", [0])
    assert "was trained by this commit" in provenance.to_html(p)


def test_the_seeds_come_from_the_config_or_else_the_scale(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert settings([]) == ("demo", [0])  # config.yaml: seeds null → the demo scale's [0]
    override = tmp_path / "report.config.yaml"
    override.write_text("{scale: paper, seeds: [4, 5]}")
    assert settings([override]) == ("paper", [4, 5])
    override.write_text("{scale: nosuch}")
    with pytest.raises(SystemExit, match="nosuch"):
        settings([override])


def test_the_scorecard_page_names_papers_explains_pairs_and_says_the_scale_once():
    rows = [{"paper": "fedimpro", "claim": "Splitting at the 4th layer is worse",
             "result": "reproduced", "ours": "3/3 pairs hold", "in_paper": "3/3 pairs hold",
             "require": "all"},
            {"paper": "fedbr", "claim": "Most components beat FedAvg", "result": "not reproduced",
             "ours": "1/3 pairs hold", "in_paper": "3/3 pairs hold", "require": "majority"}]
    html = scorecard.render_html(rows, "demo", 1, "Not comparable with the papers'.")
    assert "<td>FedImpro</td>" in html and "<td>FedBR</td>" in html
    assert ">fedimpro<" not in html and ">fedbr<" not in html
    header = re.search(r"<tr><th>.*?</tr>", html).group()
    assert re.findall(r"<th>(.*?)</th>", header) == ["Paper", "Claim", "Result", "Ours",
                                                     "In the paper"]
    assert "class='warning'" in html and "Not comparable" in html
    assert "<i>needs every pair</i>" in html and "<i>needs a majority of pairs</i>" in html
    for words in ("pairs of cells", "Identical runs count once", "Ties.", "Every pair or a "
                  "majority", "Not enough evidence", "What ran", "“In the paper”"):
        assert words in scorecard.LEGEND and words in html
    md = scorecard.render_markdown(rows, "demo", 1, "Not comparable with the papers'.")
    assert "| FedImpro |" in md and "> **Scale demo.** Not comparable" in md
    assert "**2 claims:** 1 reproduced · 1 not reproduced" in md


def test_the_scorecard_comes_first_in_the_sidebar():
    # the entries' sort keys put the scorecard first; the finished page keeps that order and
    # shows the entries without their keys
    entries = [papers.report_category(p) for p in papers.PAPERS] + [papers.SCORECARD_CATEGORY]
    assert sorted(entries)[0] == papers.SCORECARD_CATEGORY
    assert all(papers.split_sort_key(e)[0] is not None for e in entries)
    assert papers.split_sort_key(papers.SCORECARD_CATEGORY) == ("0", "Scorecard")


# --------------------------------------------------------------------------- the page's data

TABLE = "results/demo/tables/vhl/{}.html"
FIGURE = "results/demo/figures/vhl/{}.png"


def png_with_notes(notes: list[str]) -> str:
    """A figure's data URI as the workflow saves it (fedhet.figures.save)."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedhet.figures.save import save_figure, set_notes

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, 1])
    set_notes(fig, notes)
    buffer = io.BytesIO()
    save_figure(fig, buffer, dpi=40)
    plt.close(fig)
    return ("data:image/png;charset=utf8;filename=fig2.png;base64,"
            + base64.b64encode(buffer.getvalue()).decode())


def result(label: str, mime: str = "text/html", uri: str = "data:text/html;base64,") -> dict:
    kind = "figure" if mime == "image/png" else "table"
    return {"name": "x", "filename": "x", "labels": {kind: label}, "size": "1 KB",
            "caption": "<p>What it shows, with F_1.</p>", "mime_type": mime,
            "job_properties": {"rule": kind, "wildcards": "scale=demo, paper=vhl",
                               "params": "payload=config/papers/vhl.yaml: t1, 34 cells, "
                                         "comparable=False"},
            "data_uri": uri}


def report_data() -> tuple[dict, dict, dict]:
    """categories, results and rule graph as Snakemake writes them: sorted as text by its
    template, they put the appendix before Table 1 and the figures before the tables."""
    labels = {TABLE.format("t10"): papers.item_label("t10", "Table 10: samples"),
              TABLE.format("t2"): papers.item_label("t2", "Table 2: FMNIST"),
              TABLE.format("a1"): papers.item_label("a1", "Appendix: PACS"),
              TABLE.format("x1"): papers.item_label("x1", "Extra: code readings")}
    results = {path: result(label) for path, label in labels.items()}
    results[FIGURE.format("fig2")] = result(papers.item_label("fig2", "Figure 2: t-SNE"),
                                            "image/png", png_with_notes(["Stand-in: digits."]))
    results["results/demo/scorecard.html"] = result("the claims")
    categories = {
        papers.report_category("fedbr"): {papers.FIGURES_SUBCATEGORY: [FIGURE.format("fig2")],
                                          papers.TABLES_SUBCATEGORY: list(labels)},
        papers.report_category("vhl"): {papers.TABLES_SUBCATEGORY: [TABLE.format("t2")]},
        papers.SCORECARD_CATEGORY: {"Other": ["results/demo/scorecard.html"]},
    }
    nodes = [{"rule": r, "fx": 10, "fy": 50 * i}
             for i, r in enumerate(["prepare_data", "train", "table", "train", "figure"])]
    links = [{"source": s, "target": t, "sourcerule": nodes[s]["rule"],
              "targetrule": nodes[t]["rule"], "value": 1} for s, t in ((0, 1), (1, 2), (0, 3),
                                                                       (3, 4))]
    graph = {"data": [{"name": "node-data", "values": nodes},
                      {"name": "link-data", "values": links[1:]},
                      {"name": "link-data-direct", "values": links[:1]}]}
    return categories, results, graph


def full_page(description: str) -> str:
    """A report page with the report's data and its app's start (index.html.jinja2)."""
    categories, results, graph = report_data()
    page = snakemake_page(description)
    page = page.replace("var results = {};", f"var results = {json.dumps(results)};")
    extra = (f'<script id="categories">\n    var categories = {json.dumps(categories)};\n'
             f'    </script>\n<script id="rulegraph">\n    var rulegraph_spec = '
             f'{json.dumps(graph)};\n    </script>\n<script>class Menu {{}}</script>\n'
             "<script>'use strict';\nlet app;\nconst root = ReactDOM.createRoot("
             "document.querySelector('#app'));\nroot.render(e(App));</script>\n")
    return page.replace("</body>", extra + "</body>")


def finished_data(page: str) -> tuple[dict, dict, dict]:
    return tuple(page_variable(page, name) for name in ("categories", "results", "rulegraph"))


def page_variable(page: str, script_id: str):
    start = page.index(f'<script id="{script_id}">')
    return json.loads(re.compile(r"^\s*var \w+ = (.*);$", re.M).search(page, start).group(1))


JS = (ROOT / "workflow" / "report" / "report.js").read_text()


def test_the_sidebar_follows_the_papers_and_shows_no_sort_key():
    finished = page.finish(full_page(landing_html()), title="t", css=CSS,
                           provenance_html="<p>p</p>", script=JS)
    categories, results, _ = finished_data(finished)
    assert list(categories) == ["Scorecard", "VHL", "FedBR"]
    assert list(categories["FedBR"]) == ["Tables", "Figures"]
    titles = [results[p]["labels"]["table"] for p in categories["FedBR"]["Tables"]]
    assert titles == ["Table 2: FMNIST", "Table 10: samples", "Appendix: PACS",
                      "Extra: code readings"]
    shown = json.dumps([categories, [r["labels"] for r in results.values()]])
    for key in ("1 · ", "0 · ", "1t02", "3a01", "1fig02", "t01 ·", "a01 ·"):
        assert key not in shown, key


def test_a_results_information_names_no_internal_key():
    finished = page.finish(full_page(landing_html()), title="t", css=CSS,
                           provenance_html="<p>p</p>", script=JS)
    _, results, _ = finished_data(finished)
    for r in results.values():
        assert r["job_properties"]["params"] == r["job_properties"]["wildcards"] == ""
        assert "F<sub>1</sub>" in r["caption"]
    assert "payload=" not in finished and "comparable=" not in finished


def test_a_figures_caption_ends_with_the_notes_its_png_carries():
    finished = page.finish(full_page(landing_html()), title="t", css=CSS,
                           provenance_html="<p>p</p>", script=JS)
    _, results, _ = finished_data(finished)
    caption = results[FIGURE.format("fig2")]["caption"]
    assert caption.startswith("<p>What it shows") and caption.endswith(
        f'<div class="{page.NOTES_CLASS}"><p>Stand-in: digits.</p></div>')
    assert page.NOTES_CLASS not in results[TABLE.format("t2")]["caption"]


def test_the_workflow_diagram_draws_each_rule_once_in_columns():
    finished = page.finish(full_page(landing_html()), title="t", css=CSS,
                           provenance_html="<p>p</p>", script=JS)
    graph = page_variable(finished, "rulegraph")
    nodes = {n["rule"]: n for n in graph["data"][0]["values"]}
    assert sorted(nodes) == ["figure", "prepare_data", "table", "train"]  # train once
    assert nodes["prepare_data"]["x"] < nodes["train"]["x"] < nodes["table"]["x"]
    assert nodes["table"]["x"] == nodes["figure"]["x"]  # one column: both read the runs
    assert graph["width"] <= 880  # the landing pane's width at 1366×768
    links = {(ln["sourcerule"], ln["targetrule"]) for ln in graph["data"][1]["values"]}
    assert links == {("prepare_data", "train"), ("train", "table"), ("train", "figure")}


def test_the_script_runs_before_the_app_and_finishing_stays_idempotent():
    once = page.finish(full_page(landing_html()), title="t", css=CSS,
                       provenance_html="<p>p</p>", script=JS)
    script = once.index(f'<script id="{page.SCRIPT_ID}">')
    assert script < once.index(page.APP_START) and script > once.index("class Menu")
    assert once.count(f'<script id="{page.SCRIPT_ID}">') == 1
    assert page.finish(once, title="t", css=CSS, provenance_html="<p>p</p>", script=JS) == once
    assert "document.title" in JS  # the sidebar's header names the report


@pytest.mark.parametrize("caption", ["figure", "table", "leaderboard_table"])
def test_a_title_with_rst_markup_characters_renders_as_written(caption):
    """FedLGD Fig. 3b's title holds |τ|, which reStructuredText reads as a substitution: the
    caption must print it, not a docutils error."""

    class Params:
        payload = {"spec": {"title": "Figure 3b: distillation rounds |τ| *per* round"},
                   "paper_name": "FedLGD"}
        caption = "What it shows."

    class Snakemake:
        config = {"scale": "demo", "scale_comparable": False}
        params = Params
        wildcards = type("W", (), {"challenger": "mine", "paper": "fedlgd", "table": "t1"})

    text = Environment().from_string((ROOT / "workflow" / "report" / f"{caption}.rst").read_text())
    html = publish_parts(text.render(snakemake=Snakemake), writer="html")["html_body"]
    assert "distillation rounds |τ| *per* round" in html and "problematic" not in html

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
CSS = (ROOT / "reports" / "report.css").read_text()


def landing_html(scale: str = "demo") -> str:
    """reports/workflow.rst rendered as Snakemake renders the report's text (Jinja, then
    docutils' HTML writer)."""

    class Snakemake:
        config = {
            "scale": scale,
            "scale_warning": "Not comparable with the papers'.",
            "scale_note": "Digits stand in for CIFAR-10.",
        }

    text = Environment().from_string((ROOT / "reports" / "workflow.rst").read_text())
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
    # the report sorts its sidebar entries as text (JavaScript's localeCompare: digits first)
    entries = [papers.report_category(p) for p in papers.PAPERS] + [papers.SCORECARD_CATEGORY]
    assert sorted(entries)[0] == papers.SCORECARD_CATEGORY
    assert all(e[0].isdigit() for e in entries)

"""The finished HTML report in a real browser: headless Chromium (Debian's `chromium`) driven by
Playwright (the `[browser]` extra), at a laptop's 1366×768. It opens the report, clicks every
sidebar entry (Workflow, Statistics, About, every category, subcategory and result: its view and
its information) and collects what a reader would meet:

- a console error or uncaught exception;
- an image that does not decode;
- the landing view: its title, first paragraph and the scale's warning box not all in the window
  without scrolling, or its top out of reach of the scroll bars;
- a figure whose top (or left edge) lies out of reach of the scroll bars;
- the sidebar wider than a third of the window;
- a clipped title or legend: the landing title, a table's or the scorecard's heading or legend,
  or a sidebar label whose box reaches outside its window or frame, or whose text overflows its
  box. (Text inside the figures' PNGs is checked where they are drawn, by matplotlib:
  tests/figure_checks.py, for every figure kind.)
- figure text smaller than 9 CSS pixels once the image is scaled to the pane: the figure's
  smallest font size in points (its PNG says, with its dpi: fedhet.figures.save) × dpi / 72 ×
  the displayed width / the natural width;
- a table wider than its pane (the frame it is shown in);
- an internal key a reader should never meet in the sidebar (its labels, breadcrumbs and
  information panels) or the titles: the sort keys that order the sidebar ("1t02 · ",
  "figd02 · ", "0 · "), "Item x1", a job's params ("payload=", "comparable=");
- the sidebar's header not naming the report, or the workflow diagram drawing a rule twice.

and follows the scorecard's links: the landing view's verdict summary (each verdict counted, in
colour) and its link to the scorecard, the scorecard's own summary (the same counts), and a pair's
link from the scorecard to its table's cell.

The report: $FEDHET_REPORT, else reports/demo/ci-report.html (what .ci/run builds and finishes).
Where Chromium, Playwright or the report is missing the tests are skipped with the reason;
$FEDHET_BROWSER_TEST=required (set by .ci/run) makes that a failure. $FEDHET_REPORT_SHOTS names a
folder for screenshots of every view."""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path

import pytest

from fedhet.figures.save import MIN_CSS_PX, css_px, readability

pytestmark = pytest.mark.repo_state  # the report the workflow built
ROOT = Path(__file__).resolve().parents[1]
REPORT = Path(os.environ.get("FEDHET_REPORT") or ROOT / "reports" / "demo" / "ci-report.html")
VIEWPORT = {"width": 1366, "height": 768}
SLACK = 1  # CSS pixels: rounding of boxes
EDGE = 8  # CSS pixels a table keeps clear of its pane's right edge

# the content pane: the element after the sidebar (<nav>) in the template's outer row
PANE = "document.querySelector('#app nav').nextElementSibling"
PANE_CSS = "#app nav + *"


def unavailable(reason: str) -> None:
    if os.environ.get("FEDHET_BROWSER_TEST") == "required":
        pytest.fail(f"{reason} ($FEDHET_BROWSER_TEST=required)")
    pytest.skip(reason)


def chromium() -> str | None:
    return os.environ.get("FEDHET_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")


# what a reader must not meet in the sidebar or a title: the sidebar's sort keys at the start of
# a label or line ("1t02 · ", "figd02 · ", "0 · "), a config's item id, a job's params
INTERNAL_KEY = re.compile(r"(?m)^\s*[0-9a-z]+ · |\bItem [a-z]+\d|payload=|comparable=")

# --------------------------------------------------------------------------- checks in the page

LANDING = """() => {
  const pane = %s;
  pane.scrollTop = 0; pane.scrollLeft = 0;
  const out = [];
  const box = (el) => el.getBoundingClientRect();
  const inWindow = (r) => r.top >= -%d && r.left >= -%d && r.bottom <= innerHeight + %d
                          && r.right <= innerWidth + %d;
  const parts = {
    'title': pane.querySelector('.prose h1'),
    'first paragraph': pane.querySelector('.prose h1 ~ p'),
    "scale's warning box": pane.querySelector('.prose .admonition.warning'),
  };
  for (const [name, el] of Object.entries(parts)) {
    if (!el) { out.push(`no ${name}`); continue; }
    const r = box(el);
    if (!inWindow(r)) out.push(`${name} not in the window without scrolling: spans ` +
      `x ${Math.round(r.left)}..${Math.round(r.right)}, y ${Math.round(r.top)}..` +
      `${Math.round(r.bottom)} of ${innerWidth}x${innerHeight}`);
  }
  return out;
}""" % (PANE, SLACK, SLACK, SLACK, SLACK)

# where the pane's content starts when scrolled to the top left: above or left of the pane
# means out of reach
REACH = """(selector) => {
  const pane = %s;
  pane.scrollTop = 0; pane.scrollLeft = 0;
  const el = selector ? pane.querySelector(selector) : pane.firstElementChild;
  if (!el) return null;
  const p = pane.getBoundingClientRect(), r = el.getBoundingClientRect();
  return {top: r.top - p.top, left: r.left - p.left, height: r.height,
          scrollHeight: pane.scrollHeight};
}""" % PANE

SIDEBAR = """() => {
  const nav = document.querySelector('#app nav');
  const out = {width: nav.getBoundingClientRect().width, window: innerWidth, clipped: []};
  if (nav.scrollWidth > nav.clientWidth + %d)
    out.clipped.push(`sidebar content ${nav.scrollWidth}px wide in ${nav.clientWidth}px`);
  const nr = nav.getBoundingClientRect();
  for (const el of nav.querySelectorAll('a span, td, li')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || !el.textContent.trim()) continue;
    if (el.scrollWidth > el.clientWidth + %d || r.right > nr.right + %d || r.left < nr.left - %d)
      out.clipped.push(`sidebar label "${el.textContent.trim().slice(0, 60)}"`);
  }
  return out;
}""" % (SLACK, SLACK, SLACK, SLACK)

# in a table's or the scorecard's page (an iframe): headings and legends inside the frame
FRAME_TEXT = """() => {
  const out = [];
  const w = document.documentElement.clientWidth;
  const els = document.querySelectorAll('h1, h2, h3, h4, p, caption');
  if (!els.length) out.push('no heading or legend at all');
  for (const el of els) {
    const r = el.getBoundingClientRect();
    if (r.left < -%d || r.right > w + %d || el.scrollWidth > el.clientWidth + %d)
      out.push(`"${el.textContent.trim().slice(0, 60)}" spans x ${Math.round(r.left)}..` +
               `${Math.round(r.right)} of ${w}`);
  }
  return out;
}""" % (SLACK, SLACK, SLACK)

# in a frame: each table's width against the frame's (its pane), and the titles
FRAME_TABLES = """() => {
  const w = document.documentElement.clientWidth;
  const wide = [];
  for (const t of document.querySelectorAll('table')) {
    const r = t.getBoundingClientRect();
    if (r.right > w - %d || r.left < -%d)
      wide.push(`a table spans x ${Math.round(r.left)}..${Math.round(r.right)} of ${w}`
                + ` (it keeps %d px clear of the right edge)`);
  }
  const titles = Array.from(document.querySelectorAll('h1, h2, h3, h4, title'))
                      .map((h) => h.textContent);
  return {wide, titles};
}""" % (EDGE, SLACK, EDGE)

# a figure as shown: its PNG (the result's data) and its displayed and natural widths
FIGURE_SHOWN = """() => {
  const img = %s.querySelector('img');
  const r = results[app.state.resultPath];
  if (!img || !r) return null;
  return {uri: r.data_uri, shown: img.getBoundingClientRect().width,
          natural: img.naturalWidth};
}""" % PANE

IMAGE = """async () => {
  const img = %s.querySelector('img');
  if (!img) return {error: 'no image shown'};
  try { await img.decode(); } catch (e) { return {error: `does not decode (${e.message})`}; }
  if (!img.naturalWidth) return {error: 'decoded to an empty image'};
  return {natural: [img.naturalWidth, img.naturalHeight]};
}""" % PANE


# the landing view's verdict summary (workflow/report/workflow.rst: `.. container:: fedhet-verdicts`)
VERDICTS = """() => {
  const box = %s.querySelector('.fedhet-verdicts');
  if (!box) return null;
  const badges = [...box.querySelectorAll('.verdict')].map((b) => ({
    text: b.textContent.trim(), colour: getComputedStyle(b).backgroundColor}));
  const link = box.querySelector('a[data-fedhet-result]');
  return {badges, link: link ? link.getAttribute('data-fedhet-result') : null,
          bottom: box.getBoundingClientRect().bottom, window: innerHeight};
}""" % PANE

# in the scorecard's frame: its summary's badges and its pairs' links to the tables' cells
SCORECARD = """() => ({
  badges: [...document.querySelectorAll('.summary .verdict')].map((b) => b.textContent.trim()),
  rows: document.querySelectorAll('table.scorecard tr[id^=claim-]').length,
  links: document.querySelectorAll('a[data-result][data-anchor]').length,
})"""


# --------------------------------------------------------------------------- the walk


class Walk:
    """Open the report, click every entry, record the problems of each kind."""

    def __init__(self, page, shots: Path | None):
        self.page = page
        self.shots = shots
        self.problems: dict[str, list[str]] = {k: [] for k in (
            "console", "image", "landing", "figure top", "sidebar", "clipped", "figure text",
            "table width", "internal key")}
        self.smallest: dict[str, float] = {}  # figure → its smallest text, CSS pixels
        self.views = 0
        self.figures = 0
        self.frames = 0
        self.verdicts = None
        self.links: dict = {}

    def note(self, kind: str, where: str, what: str) -> None:
        self.problems[kind].append(f"{where}: {what}")

    def shot(self, name: str) -> None:
        if self.shots is not None:
            self.shots.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80]
            self.page.screenshot(path=str(self.shots / f"{self.views:03d}-{slug}.png"))

    def settle(self) -> None:
        self.page.wait_for_timeout(150)

    def set_view(self, view: str) -> None:
        self.page.evaluate(f"() => app.setView({view})")
        self.settle()

    def check_keys(self, where: str, text: str, what: str) -> None:
        for line in text.splitlines():
            if INTERNAL_KEY.search(line):
                self.note("internal key", where, f"{what}: {line.strip()[:100]!r}")

    def check_sidebar(self, where: str) -> None:
        self.check_keys(where, self.page.locator("#app nav").first.inner_text(), "sidebar")
        side = self.page.evaluate(SIDEBAR)
        if side["width"] > side["window"] / 3 + SLACK:
            self.note("sidebar", where, f"sidebar {side['width']:.0f}px wide, more than a third "
                                        f"of the {side['window']}px window")
        for label in side["clipped"]:
            self.note("clipped", where, label)

    def check_reach(self, where: str, selector: str | None, kind: str) -> None:
        reach = self.page.evaluate(REACH, selector)
        if reach is None:
            return
        if reach["top"] < -SLACK or reach["left"] < -SLACK:
            self.note(kind, where, f"starts {-reach['top']:.0f}px above and {-reach['left']:.0f}"
                                   "px left of the reachable area (scrolled to the top left)")

    def landing(self) -> None:
        where = "landing view"
        for problem in self.page.evaluate(LANDING):
            self.note("landing", where, problem)
        self.check_reach(where, None, "landing")
        title = self.page.evaluate(
            f"() => {{ const h = {PANE}.querySelector('.prose h1'); if (!h) return null; "
            "const r = h.getBoundingClientRect(); "
            "return [r.left, r.right, h.scrollWidth > h.clientWidth + 1]; }")
        if title and (title[0] < -SLACK or title[1] > VIEWPORT["width"] + SLACK or title[2]):
            self.note("clipped", where, "the title reaches outside the window")
        self.check_sidebar(where)
        self.verdicts = self.page.evaluate(VERDICTS)
        self.shot("landing")

    def scorecard_links(self) -> None:
        """From the landing view's link to the scorecard, and from the scorecard's first pair
        to its table's cell: what each opened."""
        self.set_view("{navbarMode: 'menu', content: 'rulegraph'}")
        link = self.page.locator(f"{PANE_CSS} .fedhet-verdicts a[data-fedhet-result]").first
        if not link.count():
            return
        link.click()
        self.settle()
        self.links["opened"] = self.page.evaluate("() => [app.state.content, "
                                                  "app.state.resultPath]")
        frame = self.page.locator("iframe").first.element_handle().content_frame()
        frame.wait_for_load_state()
        self.links["scorecard"] = frame.evaluate(SCORECARD)
        pair = frame.locator("a[data-result][data-anchor]").first
        if not pair.count():
            return
        frame.locator("details").first.evaluate("(d) => { d.open = true; }")
        self.links["pair"] = {"anchor": pair.get_attribute("data-anchor"),
                              "result": pair.get_attribute("data-result")}
        pair.click()
        self.settle()
        self.links["table"] = self.page.evaluate(
            "() => [app.state.content, app.state.resultPath, app.state.contentPath.split('#')"
            ".pop()]")
        table = self.page.locator("iframe").first.element_handle().content_frame()
        table.wait_for_load_state()
        self.links["target"] = table.evaluate(
            "() => { const t = document.querySelector(':target'); "
            "return t ? [t.id || t.parentElement.id, t.tagName] : null; }")
        self.shot("scorecard link to a cell")

    def general(self) -> None:
        for label in ("Workflow", "Statistics", "About"):
            self.set_view("{navbarMode: 'menu'}")
            self.page.locator("#app nav ul a", has_text=label).first.click()
            self.settle()
            self.views += 1
            self.check_sidebar(label)
            self.check_reach(label, None, "landing" if label == "Workflow" else "figure top")
            self.shot(label)

    def results(self) -> None:
        categories = self.page.evaluate("() => Object.keys(categories)")
        for category in categories:
            self.set_view("{navbarMode: 'menu'}")
            self.page.locator("#app nav ul a", has_text=category).first.click()
            self.settle()
            self.check_sidebar(category)
            subcategories = self.page.evaluate(
                "(c) => Object.keys(categories[c])", category)
            for sub in subcategories:
                if len(subcategories) > 1:
                    self.page.evaluate("(c) => app.showCategory(c)", category)
                    self.settle()
                    self.page.locator("#app nav ul a", has_text=sub).first.click()
                    self.settle()
                self.rows(category, sub)

    def rows(self, category: str, sub: str) -> None:
        back = ("(a) => app.setView({navbarMode: 'subcategory', category: a[0], "
                "subcategory: a[1]})")
        rows = self.page.locator("#app nav tbody tr")
        for i in range(rows.count()):
            self.page.evaluate(back, [category, sub])
            self.settle()
            row = self.page.locator("#app nav tbody tr").nth(i)
            label = " ".join(row.locator("td").first.inner_text().split())
            where = f"{category} / {sub} / {label}"
            buttons = row.locator("td").last.locator("a")
            buttons.first.click()  # view
            self.settle()
            self.views += 1
            self.check_sidebar(where)
            self.content(where)
            buttons = self.page.locator("#app nav tbody tr").nth(i).locator("td").last.locator(
                "a")
            if buttons.count() > 1:
                buttons.last.click()  # information (the caption)
                self.settle()
                self.check_sidebar(f"{where} (information)")

    def content(self, where: str) -> None:
        kind = self.page.evaluate(f"() => app.state.content")
        if kind == "img":
            self.figures += 1
            image = self.page.evaluate(IMAGE)
            if "error" in image:
                self.note("image", where, image["error"])
            self.check_reach(where, "img", "figure top")
            self.figure_text(where)
            self.shot(where)
        elif kind in ("html", "pdf"):
            self.frames += 1
            frame = self.page.locator(f"iframe").first.element_handle().content_frame()
            frame.wait_for_load_state()
            for problem in frame.evaluate(FRAME_TEXT):
                self.note("clipped", where, problem)
            tables = frame.evaluate(FRAME_TABLES)
            for problem in tables["wide"]:
                self.note("table width", where, problem)
            for title in tables["titles"]:
                self.check_keys(where, title, "title")
            self.shot(where)

    def figure_text(self, where: str) -> None:
        """The figure's smallest text as the pane shows it, from what its PNG says."""
        shown = self.page.evaluate(FIGURE_SHOWN)
        if shown is None or ";base64," not in (shown["uri"] or ""):
            self.note("figure text", where, "no figure data to read its font size from")
            return
        info = readability(base64.b64decode(shown["uri"].split(",", 1)[1]))
        if info["font_pt"] is None or info["dpi"] is None:
            self.note("figure text", where, "its PNG does not say its smallest font size and "
                                            "dpi (fedhet.figures.save)")
            return
        size = css_px(info["font_pt"], info["dpi"], shown["natural"], shown["shown"])
        self.smallest[where] = size
        if size < MIN_CSS_PX - 0.05:
            self.note("figure text", where,
                      f"{info['font_pt']:g} pt at {info['dpi']:g} dpi, shown "
                      f"{shown['shown']:.0f} of {shown['natural']} px: {size:.1f} CSS px")


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed: pip install -e '.[browser]'")
    browser_path = chromium()
    if browser_path is None:
        unavailable("no Chromium: apt-get install chromium (or set $FEDHET_CHROMIUM)")
    if not REPORT.is_file():
        unavailable(f"no report at {REPORT}: snakemake ci --cores 2 && snakemake ci --report "
                    f"{REPORT} && python -m fedhet.report {REPORT}")
    shots = os.environ.get("FEDHET_REPORT_SHOTS")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            w = Walk(page, Path(shots) if shots else None)
            page.on("console", lambda m: m.type == "error" and w.note(
                "console", "console", m.text[:300]))
            page.on("pageerror", lambda err: w.note("console", "uncaught", str(err)[:300]))
            page.goto(REPORT.resolve().as_uri())
            page.wait_for_selector("#app nav")
            w.settle()
            w.title = page.title()
            w.sidebar_entries = [" ".join(s.split()) for s in
                                 page.locator("#app nav ul a span").all_inner_texts()]
            w.header = " ".join(page.locator("#app nav > h1").first.inner_text().split())
            w.rules = page.evaluate(
                "() => rulegraph_spec.data[0].values.map((n) => n.rule)")
            w.landing()
            w.general()
            w.results()
            w.scorecard_links()
        finally:
            browser.close()
    return w


def problems(walk, kind: str) -> str:
    found = walk.problems[kind]
    return f"{len(found)} problem(s):\n" + "\n".join(found[:40])


def test_every_entry_was_opened(walk):
    # the ci report holds a scorecard, tables and figures: a walk that saw none checked nothing
    assert walk.figures > 0 and walk.frames > 0, (walk.figures, walk.frames)


def test_no_console_error(walk):
    assert not walk.problems["console"], problems(walk, "console")


def test_every_image_decodes(walk):
    assert not walk.problems["image"], problems(walk, "image")


def test_the_landing_view_shows_title_text_and_warning_from_its_top(walk):
    assert not walk.problems["landing"], problems(walk, "landing")


def test_every_figure_top_is_within_reach(walk):
    assert not walk.problems["figure top"], problems(walk, "figure top")


def test_the_sidebar_stays_within_a_third_of_the_window(walk):
    assert not walk.problems["sidebar"], problems(walk, "sidebar")


def test_no_title_or_legend_is_clipped(walk):
    assert not walk.problems["clipped"], problems(walk, "clipped")


def test_the_tab_names_the_project_and_the_scale(walk):
    assert re.search(r"fedhet.*scale \w+", walk.title), walk.title


def test_the_scorecard_comes_first_among_the_results(walk):
    results = walk.sidebar_entries[walk.sidebar_entries.index("About") + 1:]
    assert results and results[0].endswith("Scorecard"), walk.sidebar_entries


def test_the_landing_view_counts_the_verdicts_in_colour_and_links_the_scorecard(walk):
    found = walk.verdicts
    assert found is not None, "no verdict summary (.fedhet-verdicts) in the landing view"
    assert found["badges"], "the verdict summary counts no verdict"
    for badge in found["badges"]:
        assert re.fullmatch(r"\d+ [a-z ]+", badge["text"]), badge
        assert badge["colour"] not in ("rgba(0, 0, 0, 0)", "transparent"), badge
    assert found["link"] and found["link"].endswith("scorecard.html"), found
    # the link opens the scorecard, whose own summary counts the same verdicts
    assert walk.links.get("opened") == ["html", found["link"]], walk.links
    card = walk.links["scorecard"]
    assert card["badges"] == [b["text"] for b in found["badges"]], (card, found)
    total = sum(int(b["text"].split()[0]) for b in found["badges"])
    assert card["rows"] == total, card


def test_a_pair_of_the_scorecard_opens_its_tables_cell(walk):
    if walk.links.get("scorecard", {}).get("links", 0) == 0:
        pytest.skip("the scorecard compared no pair (nothing ran)")
    pair = walk.links["pair"]
    assert walk.links["table"] == ["html", pair["result"], pair["anchor"]], walk.links
    assert walk.links["target"] and walk.links["target"][0] == pair["anchor"], walk.links


def test_no_figure_text_is_smaller_than_9_css_pixels_in_its_pane(walk):
    assert walk.smallest, "no figure's text was measured"
    assert not walk.problems["figure text"], problems(walk, "figure text")


def test_no_table_is_wider_than_its_pane(walk):
    assert not walk.problems["table width"], problems(walk, "table width")


def test_the_sidebar_and_the_titles_name_no_internal_key(walk):
    assert not walk.problems["internal key"], problems(walk, "internal key")
    assert not [e for e in walk.sidebar_entries if INTERNAL_KEY.search(e)], walk.sidebar_entries


def test_the_sidebar_names_the_report_and_the_diagram_draws_each_rule_once(walk):
    assert "Snakemake" not in walk.header and re.search(r"fedhet.*scale \w+", walk.header), \
        walk.header
    assert walk.rules and len(walk.rules) == len(set(walk.rules)), walk.rules

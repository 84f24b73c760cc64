"""Finish Snakemake's generated report page: the browser tab's title, fedhet's stylesheet (layout
fixes of the report template: workflow/report/report.css) and script (workflow/report/report.js), the provenance
and the scorecard's verdicts written into the landing text's placeholders, the script that lets a
link open a result (the landing text's link to the scorecard, the scorecard's links to the
tables' cells), and the page's data made readable:

- the sidebar's entries in the papers' order, without the sort keys that put them there
  (`fedhet.papers`: "1 · VHL", "1t02 · Table 2: ..." become "VHL", "Table 2: ...");
- a result's information shows what it is, not the job's internals (its params and wildcards);
- a figure's caption ends with the notes its PNG carries (`fedhet.figures.save`): what stood in
  for what, what this scale left out, which cells are pending;
- the workflow's diagram draws each rule once, in columns from the data to the tables.

Idempotent: finishing a finished page gives the same page."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Mapping
from typing import Any

from fedhet.papers import split_sort_key

STYLE_ID = "fedhet-report-style"
SCRIPT_ID = "fedhet-report-script"
# the landing text's placeholder (workflow/report/workflow.rst: `.. container:: fedhet-provenance`)
PLACEHOLDER = re.compile(r'(<div class="fedhet-provenance[^"]*">).*?(</div>)', re.S)
# and of the scorecard's verdicts (`.. container:: fedhet-verdicts`), optional
VERDICTS = re.compile(r'(<div class="fedhet-verdicts[^"]*">).*?(</div>)', re.S)
# A link opens a result of the report as its sidebar would: a link of the landing text
# (<a data-fedhet-result="results/...">), or a message from a result's page in its frame (the
# scorecard's links to the tables' cells: {fedhet: "open", result, anchor}); the result's own
# category is shown in the sidebar, and an HTML result opens at the anchor.
OPENER = """(function () {
  function open(path, anchor) {
    if (typeof results === 'undefined' || typeof app === 'undefined' || !results[path]) {
      return false;
    }
    var entry = results[path];
    var mime = entry.mime_type || '';
    var kind = mime === 'text/html' ? 'html' : mime === 'application/pdf' ? 'pdf'
      : mime.indexOf('image/') === 0 ? 'img' : null;
    if (!kind) return false;
    var view = {content: kind, resultPath: path,
                contentPath: entry.data_uri + (anchor && kind === 'html' ? '#' + anchor : '')};
    for (var cat in categories) {
      for (var sub in categories[cat]) {
        if (categories[cat][sub].indexOf(path) >= 0) {
          view.navbarMode = 'subcategory'; view.category = cat; view.subcategory = sub;
        }
      }
    }
    if (view.navbarMode && (app.state.navbarMode !== 'subcategory'
        || app.state.category !== view.category || app.state.subcategory !== view.subcategory)) {
      // the sidebar's list of results keeps the one it first drew: through the menu, so that
      // it draws the new one
      app.setView({navbarMode: 'menu'});
      setTimeout(function () { app.setView(view); }, 0);
    } else {
      app.setView(view);
    }
    return true;
  }
  window.addEventListener('message', function (event) {
    var d = event.data;
    if (d && d.fedhet === 'open' && typeof d.result === 'string') {
      open(d.result, typeof d.anchor === 'string' ? d.anchor : '');
    }
  });
  document.addEventListener('click', function (event) {
    var a = event.target.closest && event.target.closest('a[data-fedhet-result]');
    if (a && open(a.getAttribute('data-fedhet-result'), '')) event.preventDefault();
  });
})();"""
TITLE = re.compile(r"<title>.*?</title>", re.S)
STYLE = re.compile(rf'\n?<style id="{STYLE_ID}">.*?</style>', re.S)
SCRIPT = re.compile(rf'<script id="{SCRIPT_ID}">.*?</script>\n?', re.S)
VARIABLE = re.compile(r"^(\s*var \w+ = )(.*);$", re.M)
# where the report's app starts (its last component, app.js): fedhet's script runs before it
APP_START = "const root = ReactDOM.createRoot("
NOTES_CLASS = "fedhet-figure-notes"
NOTES = re.compile(rf'<div class="{NOTES_CLASS}">.*?</div>', re.S)
GRAPH_MARK = "fedhet: each rule once, in columns from the data to the results"


class ReportPageError(ValueError):
    """A page that is not a Snakemake HTML report of the expected layout."""


def results_of(page: str) -> dict:
    """The report's results (path → name, mime type, data URI, ...), as its page holds them;
    empty where it holds none."""
    # its own script element: a library of the page declares a `var results` too
    match = _find_variable(page, "results", "results")
    if match is None:
        return {}
    try:
        return json.loads(match.group(2))
    except ValueError:
        return {}


def finish(page: str, *, title: str, css: str, provenance_html: str, script: str = "",
           verdicts_html: str | None = None) -> str:
    """`page` (Snakemake's report.html) with `title` in the tab, `css` last in its head,
    `script` and the one that opens a result from a link (OPENER) run before the report's app
    starts, `provenance_html` in the landing text's provenance placeholder, `verdicts_html`
    (the scorecard's verdicts counted, with a link to it) in its verdicts placeholder where it
    has one, and its results, sidebar and workflow diagram made readable."""
    if not TITLE.search(page) or "</head>" not in page:
        raise ReportPageError("no <title> or </head>: not a Snakemake HTML report")
    page = TITLE.sub(lambda _: f"<title>{html.escape(title)}</title>", page, count=1)
    if "</style" in css:
        raise ReportPageError("the stylesheet may not contain '</style'")
    if "</script" in script:
        raise ReportPageError("the script may not contain '</script'")
    page = STYLE.sub("", page)
    head_end = page.index("</head>")
    page = f'{page[:head_end]}<style id="{STYLE_ID}">{css}</style>\n{page[head_end:]}'

    def landing(text: str) -> str:
        if not PLACEHOLDER.search(text):
            raise ReportPageError("the landing text has no provenance placeholder "
                                  "(workflow/report/workflow.rst: `.. container:: fedhet-provenance`)")
        text = PLACEHOLDER.sub(lambda m: m.group(1) + provenance_html + m.group(2), text,
                               count=1)
        if verdicts_html is not None:
            text = VERDICTS.sub(lambda m: m.group(1) + verdicts_html + m.group(2), text,
                                count=1)
        return text

    page = _edit_variable(page, "workflow-desc", "workflow_desc", landing, required=True)
    if "<script id=\"categories\">" in page:  # the report's data: absent from a bare test page
        categories = _read_variable(page, "categories")
        results = _read_variable(page, "results")
        categories, results = order_entries(categories, results)
        results = {path: readable_result(result) for path, result in results.items()}
        page = _write_variable(page, "categories", categories)
        page = _write_variable(page, "results", results)
    if "<script id=\"rulegraph\">" in page:
        page = _edit_variable(page, "rulegraph", "rulegraph_spec", rule_graph)
    page = SCRIPT.sub("", page)
    script = f"{script}\n{OPENER}" if script else OPENER
    element = f'<script id="{SCRIPT_ID}">{script}</script>\n'
    start = page.find(APP_START)
    if start >= 0:  # before the report's app, which reads what the script sets
        at = page.rfind("<script>", 0, start)
    else:  # a page without the app (a bare page): last in its body
        at = page.rindex("</body>") if "</body>" in page else len(page)
    return page[:at] + element + page[at:]


# --------------------------------------------------------------------------- the page's variables


def _find_variable(page: str, script_id: str, name: str | None = None) -> re.Match[str] | None:
    """`var NAME = VALUE;` in the script element of id `script_id`."""
    start = page.find(f'<script id="{script_id}">')
    if start < 0:
        return None
    match = VARIABLE.search(page, start)
    if match is None or (name is not None and f"var {name} =" not in match.group(1)):
        return None
    return match


def _read_variable(page: str, script_id: str) -> Any:
    match = _find_variable(page, script_id)
    if match is None:
        raise ReportPageError(f"no `var ... = ...;` in <script id=\"{script_id}\">: not a "
                              "Snakemake HTML report of the expected version")
    return json.loads(match.group(2))


def _encode(value: Any) -> str:
    # JSON inside <script>: "</" would end the script early
    return json.dumps(value).replace("</", "<\\/")


def _splice(page: str, match: re.Match[str], value: Any) -> str:
    """`page` with the value of the variable `match` found replaced by `value`."""
    return page[:match.start(2)] + _encode(value) + page[match.end(2):]


def _write_variable(page: str, script_id: str, value: Any) -> str:
    match = _find_variable(page, script_id)
    assert match is not None  # read before
    return _splice(page, match, value)


def _edit_variable(page: str, script_id: str, name: str, edit, required: bool = False) -> str:
    match = _find_variable(page, script_id, name)
    if match is None:
        if required:
            raise ReportPageError(f"no `var {name} = ...;` line: not a Snakemake HTML report "
                                  "of the expected version")
        return page
    return _splice(page, match, edit(json.loads(match.group(2))))


# --------------------------------------------------------------------------- the sidebar


def _ordered(names: list[str]) -> list[tuple[str, str]]:
    """(name, shown) of each name, in the order of their sort keys (a name without one after
    those with, in its first order)."""
    keyed = []
    for index, name in enumerate(names):
        key, shown = split_sort_key(name)
        keyed.append(((key is None, key or "", index), name, shown))
    return [(name, shown) for _, name, shown in sorted(keyed)]


def order_entries(categories: Mapping[str, Mapping[str, list[str]]],
                  results: Mapping[str, Mapping[str, Any]]):
    """The sidebar's categories, subcategories and results in the order of their sort keys,
    each shown without its key (the report's app keeps this order: workflow/report/report.js); the
    results' labels likewise."""
    def row_key(path: str) -> tuple:
        labels = results.get(path, {}).get("labels") or {}
        first = next(iter(labels.values()), "") if isinstance(labels, dict) else ""
        key, shown = split_sort_key(str(first))
        return (key is None, key or "")

    out: dict[str, dict[str, list[str]]] = {}
    for name, shown in _ordered(list(categories)):
        subs = categories[name]
        out[shown] = {}
        for sub, sub_shown in _ordered(list(subs)):
            paths = list(subs[sub])
            order = {path: i for i, path in enumerate(paths)}
            out[shown][sub_shown] = sorted(paths, key=lambda p: (*row_key(p), order[p]))
    fixed = {}
    for path, result in results.items():
        result = dict(result)
        if isinstance(result.get("labels"), dict):
            result["labels"] = {k: split_sort_key(str(v))[1] for k, v in result["labels"].items()}
        fixed[path] = result
    return out, fixed


def readable_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result as its information panel shows it: without the job's params and wildcards
    (internal keys: payload=config/papers/...; the caption says what the result is), and a
    figure's caption followed by the notes its PNG carries."""
    result = dict(result)
    job = dict(result.get("job_properties") or {})
    if job:
        job["params"] = ""
        job["wildcards"] = ""
        result["job_properties"] = job
    if result.get("caption"):
        result["caption"] = subscripts_in_html(result["caption"])
    uri = str(result.get("data_uri") or "")
    if result.get("mime_type") == "image/png" and uri.startswith("data:image/png;") and \
            ";base64," in uri.split(",", 1)[0] + ",":
        notes = png_notes(base64.b64decode(uri.split(",", 1)[1]))
        caption = NOTES.sub("", result.get("caption") or "")
        if notes:
            caption += notes_html(notes)
        result["caption"] = caption
    return result


def subscripts_in_html(text: str) -> str:
    """HTML with each symbol's subscript in its text set as one (F_1 → F<sub>1</sub>), the
    markup itself untouched."""
    from fedhet.printed import subscripts_html

    return re.sub(r">([^<]+)<", lambda m: ">" + subscripts_html(m.group(1)) + "<", text)


def png_notes(data: bytes) -> list[str]:
    """The notes a figure's PNG carries (`fedhet.figures.save`), [] where it has none."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            text = dict(getattr(image, "text", {}) or image.info)
        notes = json.loads(text.get("fedhet:notes", "[]"))
    except (UnidentifiedImageError, OSError, ValueError):
        return []  # not a PNG of the workflow's: no notes to show
    return [str(n) for n in notes if str(n).strip()]


def notes_html(notes: list[str]) -> str:
    from fedhet.printed import subscripts_html

    paragraphs = "".join(f"<p>{subscripts_html(html.escape(n))}</p>" for n in notes)
    return f'<div class="{NOTES_CLASS}">{paragraphs}</div>'


# --------------------------------------------------------------------------- the workflow diagram

COLUMN = 175  # px between the columns of rules, at most
ROW = 54  # px between the rules of a column
MARGIN = 20
WIDTH = 860  # px the diagram may take: the landing pane's width at 1366×768, less its padding


def rule_graph(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Snakemake's rule graph (one node per rule and level of its DAG, all in one column) as
    a Vega spec of each rule once, in columns by its longest path from the data, arrows along
    the dependencies; clicking a rule still shows it (its node keeps the field `rule`)."""
    data = {d["name"]: d.get("values", []) for d in spec.get("data", [])}
    nodes = data.get("node-data", [])
    rules = list(dict.fromkeys(str(n["rule"]) for n in nodes))
    edges = sorted({(str(link["sourcerule"]), str(link["targetrule"]))
                    for name in ("link-data", "link-data-direct")
                    for link in data.get(name, [])
                    if link.get("sourcerule") != link.get("targetrule")})
    before = {r: sorted({s for s, t in edges if t == r}) for r in rules}
    depth: dict[str, int] = {}

    def level(rule: str, seen: frozenset = frozenset()) -> int:
        if rule not in depth:
            parents = [p for p in before.get(rule, []) if p not in seen]
            depth[rule] = 1 + max((level(p, seen | {rule}) for p in parents), default=-1)
        return depth[rule]

    for rule in rules:
        level(rule)
    columns: dict[int, list[str]] = {}
    for rule in rules:
        columns.setdefault(depth[rule], []).append(rule)
    place: dict[str, tuple[float, float]] = {}
    tallest = max((len(c) for c in columns.values()), default=1)
    step = min(COLUMN, (WIDTH - 2 * MARGIN - 120) / max(1, max(columns, default=0)))
    for col in sorted(columns):
        def centre(rule: str) -> float:  # under the rules it reads from
            ys = [place[p][1] for p in before[rule] if p in place]
            return sum(ys) / len(ys) if ys else 0.0

        members = sorted(columns[col], key=lambda r: (centre(r), r))
        offset = (tallest - len(members)) * ROW / 2
        for i, rule in enumerate(members):
            place[rule] = (round(MARGIN + 60 + col * step, 1),
                           MARGIN + 16 + offset + i * ROW)
    node_values = [{"rule": r, "x": place[r][0], "y": place[r][1]} for r in rules]
    link_values = [{"sourcerule": s, "targetrule": t, "x1": place[s][0], "y1": place[s][1],
                    "x2": place[t][0], "y2": place[t][1]} for s, t in edges
                   if s in place and t in place]
    width = round(MARGIN * 2 + 120 + step * max(columns, default=0))
    height = MARGIN * 2 + 16 + ROW * (tallest - 1) + 10
    return {
        "$schema": "https://vega.github.io/schema/vega/v5.json",
        "description": GRAPH_MARK,
        "width": width,
        "height": height,
        "padding": 0,
        "autosize": "none",
        "data": [
            {"name": "node-data", "values": node_values},
            {"name": "link-data", "values": link_values,
             "transform": [{"type": "linkpath", "orient": "horizontal", "shape": "diagonal",
                            "sourceX": "x1", "sourceY": "y1", "targetX": "x2",
                            "targetY": "y2"}]},
        ],
        "scales": [{"name": "color", "type": "ordinal", "domain": rules,
                    "range": {"scheme": "tableau20"}}],
        "marks": [
            {"type": "path", "from": {"data": "link-data"},
             "encode": {"enter": {"path": {"field": "path"}, "stroke": {"value": "#94a3b8"},
                                  "strokeWidth": {"value": 1.5},
                                  "tooltip": {"signal": "datum.sourcerule + ' → ' + "
                                                        "datum.targetrule"}}}},
            {"name": "nodes", "type": "symbol", "from": {"data": "node-data"},
             "encode": {"enter": {"x": {"field": "x"}, "y": {"field": "y"},
                                  "fill": {"scale": "color", "field": "rule"},
                                  "size": {"value": 160},
                                  "cursor": {"value": "pointer"},
                                  "tooltip": {"signal": "'rule ' + datum.rule + "
                                                        "': click to show it'"}},
                        "hover": {"size": {"value": 320}},
                        "update": {"size": {"value": 160}}}},
            {"name": "labels", "type": "text", "from": {"data": "node-data"},
             "encode": {"enter": {"x": {"field": "x"}, "y": {"field": "y"},
                                  "dy": {"value": -12}, "align": {"value": "center"},
                                  "baseline": {"value": "bottom"}, "fontSize": {"value": 12},
                                  "fill": {"value": "#1e293b"}, "text": {"field": "rule"},
                                  "cursor": {"value": "pointer"}}}},
        ],
    }

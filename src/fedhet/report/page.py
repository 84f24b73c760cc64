"""Finish Snakemake's generated report page: the browser tab's title, fedhet's stylesheet (layout
fixes of the report template: reports/report.css), the provenance and the scorecard's verdicts,
written into the landing text's placeholders, and the script that lets a link open a result (the
landing text's link to the scorecard, the scorecard's links to the tables' cells). Idempotent:
finishing a finished page gives the same page."""

from __future__ import annotations

import html
import json
import re

STYLE_ID = "fedhet-report-style"
# the landing text's placeholder (reports/workflow.rst: `.. container:: fedhet-provenance`)
PLACEHOLDER = re.compile(r'(<div class="fedhet-provenance[^"]*">).*?(</div>)', re.S)
# and of the scorecard's verdicts (`.. container:: fedhet-verdicts`), optional
VERDICTS = re.compile(r'(<div class="fedhet-verdicts[^"]*">).*?(</div>)', re.S)
SCRIPT_ID = "fedhet-report-script"
SCRIPT = re.compile(rf'\n?<script id="{SCRIPT_ID}">.*?</script>', re.S)
# the template's results (a library of the page declares a `var results` too)
RESULTS = re.compile(r'<script id="results">\s*var results = (.*?);\s*</script>', re.S)
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
DESCRIPTION = re.compile(r"^(\s*var workflow_desc = )(.*);$", re.M)


class ReportPageError(ValueError):
    """A page that is not a Snakemake HTML report of the expected layout."""


def results_of(page: str) -> dict:
    """The report's results (path → name, mime type, data URI, ...), as its page holds them;
    empty where it holds none."""
    match = RESULTS.search(page)
    if match is None:
        return {}
    try:
        return json.loads(match.group(1))
    except ValueError:
        return {}


def finish(page: str, *, title: str, css: str, provenance_html: str,
           verdicts_html: str | None = None) -> str:
    """`page` (Snakemake's report.html) with `title` in the tab, `css` last in its head,
    `provenance_html` in the landing text's provenance placeholder, `verdicts_html` (the
    scorecard's verdicts counted, with a link to it) in its verdicts placeholder where it has
    one, and the script that opens a result from a link (OPENER) last in its body."""
    if not TITLE.search(page) or "</head>" not in page:
        raise ReportPageError("no <title> or </head>: not a Snakemake HTML report")
    page = TITLE.sub(lambda _: f"<title>{html.escape(title)}</title>", page, count=1)
    if "</style" in css:
        raise ReportPageError("the stylesheet may not contain '</style'")
    page = STYLE.sub("", page)
    head_end = page.index("</head>")
    page = f'{page[:head_end]}<style id="{STYLE_ID}">{css}</style>\n{page[head_end:]}'
    match = DESCRIPTION.search(page)
    if match is None:
        raise ReportPageError("no `var workflow_desc = ...;` line: not a Snakemake HTML report "
                              "of the expected version")
    text = json.loads(match.group(2))
    if not PLACEHOLDER.search(text):
        raise ReportPageError("the landing text has no provenance placeholder "
                              "(reports/workflow.rst: `.. container:: fedhet-provenance`)")
    text = PLACEHOLDER.sub(lambda m: m.group(1) + provenance_html + m.group(2), text, count=1)
    if verdicts_html is not None:
        text = VERDICTS.sub(lambda m: m.group(1) + verdicts_html + m.group(2), text, count=1)
    # a JSON string inside <script>: "</" would end the script early
    encoded = json.dumps(text).replace("</", "<\\/")
    page = page[:match.start(2)] + encoded + page[match.end(2):]
    page = SCRIPT.sub("", page)
    body_end = page.rindex("</body>") if "</body>" in page else len(page)
    return f'{page[:body_end]}<script id="{SCRIPT_ID}">{OPENER}</script>\n{page[body_end:]}'

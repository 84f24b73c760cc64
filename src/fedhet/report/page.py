"""Finish Snakemake's generated report page: the browser tab's title, fedhet's stylesheet (layout
fixes of the report template: reports/report.css) and the provenance, written into the landing
text's placeholder. Idempotent: finishing a finished page gives the same page."""

from __future__ import annotations

import html
import json
import re

STYLE_ID = "fedhet-report-style"
# the landing text's placeholder (reports/workflow.rst: `.. container:: fedhet-provenance`)
PLACEHOLDER = re.compile(r'(<div class="fedhet-provenance[^"]*">).*?(</div>)', re.S)
TITLE = re.compile(r"<title>.*?</title>", re.S)
STYLE = re.compile(rf'\n?<style id="{STYLE_ID}">.*?</style>', re.S)
DESCRIPTION = re.compile(r"^(\s*var workflow_desc = )(.*);$", re.M)


class ReportPageError(ValueError):
    """A page that is not a Snakemake HTML report of the expected layout."""


def finish(page: str, *, title: str, css: str, provenance_html: str) -> str:
    """`page` (Snakemake's report.html) with `title` in the tab, `css` last in its head and
    `provenance_html` in the landing text's provenance placeholder."""
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
    # a JSON string inside <script>: "</" would end the script early
    encoded = json.dumps(text).replace("</", "<\\/")
    return page[:match.start(2)] + encoded + page[match.end(2):]

"""`python -m fedhet.report REPORT.html [--config FILE ...]`: finish a report Snakemake wrote
(`snakemake --report`) in place: fedhet's tab title, stylesheet, script and provenance, the
sidebar in the papers' order, the figures' notes in their captions (fedhet.report.page). Run from the
workflow's directory; the `report` rule does it after building reports/<scale>/report.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from fedhet import atomic
from fedhet.report import page, provenance


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fedhet.report", description=__doc__)
    p.add_argument("report", type=Path, help="the .html report `snakemake --report` wrote")
    p.add_argument("--config", type=Path, nargs="*", default=[],
                   help="config files the report was built with, over config/config.yaml "
                        "(the scale and seeds)")
    p.add_argument("--css", type=Path, default=Path("workflow/report/report.css"))
    p.add_argument("--js", type=Path, default=Path("workflow/report/report.js"))
    return p.parse_args(argv)


def settings(configs: list[Path]) -> tuple[str, list[int]]:
    """The scale and seeds of config/config.yaml overridden by `configs` (as Snakemake merges
    --configfile); the scale's own seeds where the config names none."""
    merged: dict = {}
    for path in [Path("config/config.yaml"), *configs]:
        merged.update(yaml.safe_load(path.read_text()) or {})
    scale = str(merged["scale"])
    scale_file = Path("config/scales") / f"{scale}.yaml"
    if not scale_file.exists():
        raise SystemExit(f"{scale_file}: no such scale; run from the workflow's directory")
    seeds = merged.get("seeds") or yaml.safe_load(scale_file.read_text()).get("seeds") or [0]
    return scale, [int(s) for s in seeds]


def verdicts(results: dict) -> str:
    """The landing text's count of the verdicts, from the CSV beside the report's scorecard
    (results/<scale>/scorecard.html, or ci/scorecard.html), with a link that opens it."""
    from fedhet.tables.scorecard import summary_from_csv

    cards = sorted(path for path in results if Path(path).name == "scorecard.html")
    if not cards:
        return "<p>This report holds no scorecard.</p>"
    return summary_from_csv(Path(cards[0]).with_suffix(".csv"), cards[0])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report.suffix != ".html":
        raise SystemExit(f"{args.report}: only a single-file .html report can be finished")
    scale, seeds = settings(args.config)
    prov = provenance.collect(Path.cwd(), Path("results") / scale / "runs", scale, seeds)
    text = args.report.read_text(encoding="utf-8")
    try:
        finished = page.finish(
            text,
            title=f"fedhet report · scale {scale}",
            css=args.css.read_text(encoding="utf-8"),
            script=args.js.read_text(encoding="utf-8"),
            provenance_html=provenance.to_html(prov),
            verdicts_html=verdicts(page.results_of(text)),
        )
    except page.ReportPageError as err:
        raise SystemExit(f"{args.report}: {err}") from None
    atomic.write_text(args.report, finished)
    others = sum(len(r) for r in prov.other_commits.values())
    print(f"{args.report}: finished (commit {prov.commit or 'none'}"
          f"{', uncommitted changes' if prov.dirty else ''}; {others} run(s) of another commit)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

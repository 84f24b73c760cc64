"""Print the names of the rules of a workflow that run as cluster jobs (not local rules).

    python ci/nonlocal-rules.py [WORKFLOW_DIR] [--config KEY=VALUE ...]

Reads the Snakefile of WORKFLOW_DIR (default: the current directory) through snakemake's API;
a rule is local when it says `localrule: True` (or is listed in `localrules:`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml


def nonlocal_rules(workdir: Path, config: dict | None = None) -> list[str]:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        OutputSettings,
        Quietness,
        ResourceSettings,
    )

    snakefile = next(p for p in (workdir / "Snakefile", workdir / "workflow" / "Snakefile")
                     if p.exists())
    here = os.getcwd()
    os.chdir(workdir)
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(),
                config_settings=ConfigSettings(config=config or {}),
                snakefile=snakefile.resolve(),
                workdir=workdir.resolve(),
            )
            # the parsed workflow (snakemake 9's API exposes no public view of local rules)
            workflow = workflow_api._workflow
            local = workflow._localrules
            return sorted(r.name for r in workflow.rules if r.name not in local and not r.norun)
    finally:
        os.chdir(here)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", nargs="?", default=".")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    config = {}
    for item in args.config:
        key, value = item.split("=", 1)
        config[key] = yaml.safe_load(value)
    for name in nonlocal_rules(Path(args.workdir), config):
        print(name)


if __name__ == "__main__":
    main()

"""Print targets for CI's SLURM step: real jobs of the workflow, at a seed no other step uses.

    python ci/slurm-targets.py --seed 202 --every-rule
        one target per non-local rule of the workflow (training, calibration, cached artefacts,
        analysis figures, and any rule added later), each the cheapest job of its rule in the
        `ci` target's DAG at that seed;
    python ci/slurm-targets.py --seed 101 --count 2
        the final.json paths of the N smallest training runs of the `ci` selection.

Run the targets with `--config 'seeds=[SEED]' --force` (an artefact shared by every seed is
already built by the earlier steps; --force submits it again).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import yaml

from fedhet import experiments as X

HERE = Path(__file__).resolve().parent


def smallest_runs(seed: int, count: int) -> list[str]:
    with open("config/config.yaml", encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    config["seeds"] = [seed]
    exp = X.load_experiment(config, ".")
    _, run_ids = X.ci_selection(exp, config.get("ci") or {})
    if not run_ids:
        run_ids = [rid for item in exp.items.values() for rid in item.run_ids()]
    run_ids = sorted(set(run_ids), key=lambda rid: (X.dataset_epochs(exp.runs[rid]), rid))
    return [f"results/{exp.scale}/runs/{rid}/final.json" for rid in run_ids[:count]]


def dag_jobs(seed: int) -> list[tuple[str, list[str], list[str]]]:
    """(rule, inputs, outputs) of every job of the `ci` target at `seed`, from a dry-run."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--forceall", "ci", "--config",
         f"seeds=[{seed}]"],
        capture_output=True, text=True, check=True,
    )
    jobs, rule, fields = [], None, {}
    for line in proc.stdout.splitlines() + [""]:
        starts = re.fullmatch(r"(?:local)?rule (\S+):", line)
        if rule and (starts or not line.startswith(" ")):  # a job block ends
            jobs.append((rule, fields.get("input", []), fields.get("output", [])))
            rule = None
        if starts:
            rule, fields = starts.group(1), {}
        elif rule and (m := re.fullmatch(r"\s+(input|output): (.*)", line)):
            fields[m.group(1)] = [f.strip() for f in m.group(2).split(",") if f.strip()]
    return jobs


def every_rule(seed: int) -> list[str]:
    spec = importlib.util.spec_from_file_location("nonlocal_rules", HERE / "nonlocal-rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cluster = module.nonlocal_rules(Path("."), {"seeds": [seed]})
    dag = dag_jobs(seed)
    targets, covered = smallest_runs(seed, 1), {"train"}
    for rule in cluster:
        if rule in covered:
            continue
        jobs = [(len(i), o[0]) for r, i, o in dag if r == rule and o]
        if not jobs:
            raise SystemExit(f"rule '{rule}' has no job in the ci target; add one to config.ci")
        targets.append(min(jobs)[1])  # the job with the fewest inputs
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument("--count", type=int, default=2)
    parser.add_argument("--every-rule", action="store_true",
                        help="one target per non-local rule instead of --count training runs")
    args = parser.parse_args()
    for target in every_rule(args.seed) if args.every_rule else smallest_runs(args.seed, args.count):
        print(target)


if __name__ == "__main__":
    main()

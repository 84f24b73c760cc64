"""Print the final.json paths of the N smallest training runs of the `ci` selection.

Used by CI to submit a few real training runs through the SLURM profile:
    python ci/slurm-targets.py --seed 101 --count 2
With a seed no other step uses, the runs are not trained yet, so they really go to SLURM.
"""

from __future__ import annotations

import argparse

import yaml

from fedhet import experiments as X


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument("--count", type=int, default=2)
    args = parser.parse_args()
    with open("config/config.yaml", encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    config["seeds"] = [args.seed]
    exp = X.load_experiment(config, ".")
    _, run_ids = X.ci_selection(exp, config.get("ci") or {})
    if not run_ids:
        run_ids = [rid for item in exp.items.values() for rid in item.run_ids()]
    run_ids = sorted(set(run_ids), key=lambda rid: (X.dataset_epochs(exp.runs[rid]), rid))
    for rid in run_ids[: args.count]:
        print(f"results/{exp.scale}/runs/{rid}/final.json")


if __name__ == "__main__":
    main()

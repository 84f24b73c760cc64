"""Print the time of the CPU-side steps whose speed users wait on before any job starts.

    python ci/cpu-bench.py [--repeats N]

Speed is measured here and printed beside its target, never asserted by a test (a timed test
fails on a busy machine for no fault of the code); the tests check what these steps do. Each
figure is the median of N runs, each in a fresh Python process, so that imports count as they
do for a user:
  - expansion: `load_experiment` of each scale, imports included (the Snakefile does it at every
    `snakemake` call; target 10 s at the paper scale);
  - an impossible Dirichlet partition fails, naming its parameters (target 5 s: it must not
    retry for minutes before saying the settings cannot work).
The DAGs' build times (target 20 s each) are printed by .ci/run's dry runs of the demo and paper
DAGs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXPANSION = """
import json, sys, time, yaml
start = time.perf_counter()
from fedhet.experiments import load_experiment
cfg = yaml.safe_load(open(sys.argv[1] + "/config/config.yaml"))
cfg["scale"] = sys.argv[2]
exp = load_experiment(cfg, sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "runs": len(exp.runs),
                  "torch": "torch" in sys.modules}))
"""

PARTITION = """
import json, time
import numpy as np
from fedhet.partition import PartitionError, make_partition
labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 500))
start = time.perf_counter()
for clients, params in ((100, {"min_size": 60}),
                        (200, {"alpha": 0.001, "min_size": 20, "max_tries": 200})):
    try:
        make_partition(labels, "dirichlet", clients, 0, num_classes=10, **params)
    except PartitionError:
        pass
    else:
        raise SystemExit(f"{clients} clients with {params} did not fail")
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def in_process(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.splitlines()[-1])


def line(what: str, seconds: list[float], target: float, detail: str) -> None:
    median = statistics.median(seconds)
    spread = f"min {min(seconds):.2f}, max {max(seconds):.2f}, {len(seconds)} runs"
    print(f"{what:<34} {median:7.2f} s  (target {target:g} s; {spread})  {detail}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per figure (median)")
    args = parser.parse_args()
    for scale in ("demo", "paper"):
        runs = [in_process(EXPANSION, str(ROOT), scale) for _ in range(args.repeats)]
        line(f"expansion, {scale} scale", [r["seconds"] for r in runs], 10,
             f"{runs[0]['runs']} runs, torch imported: {runs[0]['torch']}")
    fails = [in_process(PARTITION)["seconds"] for _ in range(args.repeats)]
    line("impossible Dirichlet partitions", fails, 5, "both refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())

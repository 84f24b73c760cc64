#!/usr/bin/env bash
# The GPU check: a CUDA smoke test and benchmark for a machine with one GPU. Offline, without
# Snakemake and without installing the package (it runs from src/ through PYTHONPATH), in at
# most four minutes: each part has its own time budget (what an earlier part leaves unused goes
# to the later ones), and a part that fails or runs out of time is recorded as failed while the
# next one starts.
#
#   ci/gpu-check.sh [--cpu] [--out FILE] [--fmnist DIR] [--work DIR]
#
# Parts, in this order (a check cut short still reports the first ones):
#   1. pytest -m gpu: the CUDA correctness tests (skipped without a GPU)
#   2. the paper round (fedhet bench --round-time): ResNet-18, 5 clients x 5,000 random
#      CIFAR-shaped images, batch 128, one FedAvg round in the fastest mode and in the default
#      (what a run computes in unless its scale sets a mode; `fedhet bench --round-time` alone
#      measures every mode): our engine with clients one at a time, stacked, and the reference
#      loop (fedhet/bench/paper_round.py)
#   3. four paper-sized runs (ResNet-18, batch 64) one after another, then sharing the GPU
#   4. one real-data run: VHL Table 2's Fashion-MNIST cell (FedAvg, alpha 0.1, 1 epoch, 10
#      clients) at the small scale, fedhet train --set training.rounds=3
# Results: one JSON record per measurement in FILE (default gpu-check.json), rewritten atomically
# after each: {device, torch, mode, model, what, s_per_round, img_per_s, tflops, peak_mem_gib,
# ok, note} (`model`: the model our engine trained, null for the tests and the reference loop;
# `fedhet cost --throughput FILE` reads it); a summary table at the end. No figure is checked
# against a target.
#
#   --cpu         every part shrunk to seconds, on the CPU (CI runs this so the check never rots)
#   --fmnist DIR  Fashion-MNIST's four IDX files, .gz or not (default $FEDHET_FMNIST_DIR, else
#                 /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)
#   --work DIR    scratch space for datasets, runs and logs (default: a temporary directory,
#                 deleted afterwards unless a part failed)
#   $PYTHON       the interpreter (default python3); it needs torch, torchvision, numpy, PyYAML
#                 and pytest
# Exit status: 0 when every measurement is ok, 1 when one failed, 2 on bad usage or no GPU.
set -uo pipefail

started=$SECONDS # the budget counts from here
caller=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }

cpu=0
out=gpu-check.json
fmnist=${FEDHET_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
work=""
python=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --out | --fmnist | --work)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a value" >&2; exit 2; }
      case "$1" in --out) out=$2 ;; --fmnist) fmnist=$2 ;; --work) work=$2 ;; esac
      shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
out=$(absolute "$out")
fmnist=$(absolute "$fmnist")
if [ -n "$work" ]; then
  work=$(absolute "$work")
  keep_work=1
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-gpu-check.XXXXXX")
  keep_work=0
fi
mkdir -p "$work" "$(dirname "$out")"
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg PYTHONUNBUFFERED=1

if [ $cpu = 1 ]; then
  flag=(--cpu)
  # generous: a busy CI machine must not fail the smoke run on time
  limits=(300 300 300 300)
  budget=0 # no overall limit
  round_args=(--device cpu --modes default,bf16+channels_last --round-clients 2
    --round-samples 8 --round-batch 4 --round-width 0.0625)
  # one thread per process: the smoke run must not be slowed by threads fighting for cores
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
  flag=()
  # seconds: CUDA tests, paper round, shared runs, real-data run (the check's own start-up,
  # ~5 s, counts in the first). The whole check on a fresh H200 with 70, 70, 72 and 25 s: the
  # tests needed ~60 s plus pytest's start-up and were cut at 65 s; the paper round in four
  # modes and the shared runs took ~138 s together; the real-data run wrote its record and was
  # cut at 25 s. Estimated from there: the tests ~80 s now that the fork-server CUDA test trains
  # its two runs; the paper round in two modes ~40 s; the shared runs ~68 s; the real-data run
  # ~26 s: 219 s of the 235 before the summary.
  limits=(90 45 72 30)
  budget=240
  # the fastest mode (fedhet.engine.modes.GPU_MODES[0]) and the default
  round_args=(--device cuda --modes bf16+channels_last+cudnn_benchmark,default)
fi
# one interpreter start for both checks: importing torch takes seconds
"$python" - "$cpu" <<'EOF' || exit 2
import sys

try:
    import torch

    import fedhet.bench.gpucheck.parts, fedhet.bench.paper_round, fedhet.cli  # noqa: F401,E401
except ImportError as err:
    sys.exit(f"gpu-check: {err}; the check needs torch, torchvision, numpy, PyYAML and pytest, "
             "and runs the package from src/")
if sys.argv[1] == "0" and not torch.cuda.is_available():
    sys.exit("gpu-check: no CUDA device is visible to torch; use --cpu for the CPU smoke run")
EOF

rm -f "$out"
any_failed=0
deadline=0
# part NAME LIMIT COMMAND...: run COMMAND until the part's deadline (LIMIT seconds after the
# previous part's deadline, so time an earlier part left unused goes to this one; at most what is
# left of the check's budget), its output shown and kept in the work directory; a part that does
# not exit 0 is recorded as failed (the records it wrote before stay).
part() {
  local name=$1 limit=$2 rc=0 why
  shift 2
  deadline=$((deadline + limit))
  if [ "$budget" -gt 0 ]; then
    limit=$((deadline - (SECONDS - started)))
    local left=$((budget - (SECONDS - started) - 5))
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  local log="$work/${name// /-}.log" t0=$SECONDS
  echo "::: $name (time limit ${limit} s)"
  if [ "$limit" -lt 5 ]; then
    why="not started: the check's ${budget} s were used up"
    rc=124
  else
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    case $rc in
      0) ;;
      124 | 137)
        why="time limit ${limit} s reached; the records before this one are what it measured" ;;
      *) why="exit $rc: $(tail -n 3 "$log" | tr '\n' ' ')" ;;
    esac
  fi
  echo "::: $name: exit $rc after $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then
    any_failed=1
    "$python" -m fedhet.bench.gpucheck failed --out "$out" --what "$name" --note "$why" "${flag[@]}"
  fi
}

common=(--out "$out" --work "$work" "${flag[@]}")
part "pytest -m gpu" "${limits[0]}" "$python" -m fedhet.bench.gpucheck tests "${common[@]}"
part "paper round" "${limits[1]}" "$python" -m fedhet.cli bench --round-only --records "$out" \
  "${round_args[@]}"
part "runs sharing the device" "${limits[2]}" "$python" -m fedhet.bench.gpucheck shared-runs \
  "${common[@]}"
part "real-data run" "${limits[3]}" "$python" -m fedhet.bench.gpucheck real-run --fmnist "$fmnist" \
  "${common[@]}"

echo
echo "::: GPU check finished in $((SECONDS - started)) s; results in $out"
"$python" -m fedhet.bench.gpucheck summary "$out"
status=$?
if [ $keep_work = 0 ]; then
  if [ $status = 0 ] && [ $any_failed = 0 ]; then
    rm -rf "$work"
  else
    echo "logs and runs kept in $work"
  fi
fi
exit $status

#!/usr/bin/env bash
# The demo's time on this machine, measured as its budget is stated: Snakemake on N cores (pinned
# to N distinct physical cores where the machine has more and `taskset` exists), GPUs hidden,
# from the current directory (a fresh clone for a budget figure). Prints the wall time, the
# Snakemake process's own CPU seconds (`ps -o times`, every 5 s) and `fedhet timing` of the run's
# log; with --against, compares it job for job with another run's log.
#
#   ci/demo-timing.sh [--cores N] [--seconds S] [--against LOG] [--out DIR] [-- SNAKEMAKE_ARGS]
#
#   --cores N      cores for Snakemake (default 2, the budget's)
#   --seconds S    stop Snakemake (SIGINT) after S seconds: a cut run, to compare job for job
#   --against LOG  a log of the same DAG from another machine or version (fedhet timing)
#   --out DIR      where the log, the CPU samples and the summary go (default results/timing)
#   SNAKEMAKE_ARGS targets and options (default: the whole demo)
#   $PYTHON        the interpreter that has fedhet and Snakemake (default python)
# Exit status: Snakemake's (124 when --seconds cut it), 2 on bad usage.
set -uo pipefail

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
cores=2 seconds="" against="" out=results/timing
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores=${2:?--cores needs a number}; shift 2 ;;
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --against) against=${2:?--against needs a log}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage; exit 0 ;;
    *) echo "demo-timing: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$cores$seconds" in *[!0-9]*)
  echo "demo-timing: --cores and --seconds take whole numbers" >&2; exit 2 ;;
esac
[ -f Snakefile ] || { echo "demo-timing: run it from the workflow's root (no Snakefile here)" >&2; exit 2; }
mkdir -p "$out"

pin=()
cpus=$(lscpu -p=CPU,CORE 2>/dev/null | grep -v '^#' | sort -t, -k2,2n -u | head -n "$cores" \
  | cut -d, -f1 | paste -sd, -)
if command -v taskset >/dev/null && [ "$(nproc)" -gt "$cores" ] \
  && [ "$(echo "$cpus" | tr , '\n' | grep -c .)" -eq "$cores" ]; then
  pin=(taskset -c "$cpus")
fi
limit=()
[ -n "$seconds" ] && limit=(timeout -s INT "$seconds")

{
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), cpu family" \
    "$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model" \
    "$(grep -m1 -E '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); $(nproc) CPUs;" \
    "run on ${cores} cores${pin:+, pinned to CPUs $cpus}; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
} | tee "$out/summary.txt"

newest() { ls -t .snakemake/log/*.snakemake.log 2>/dev/null | head -1; }
before=$(newest)
start=$SECONDS
: >"$out/snakemake-cpu.tsv"
(
  while sleep 5; do
    sm=$(pgrep -f -n "^[^ ]*python[^ ]* -m snakemake --cores $cores( |$)")
    [ -n "$sm" ] && echo -e "$((SECONDS - start))\t$(ps -o times= -p "$sm" | tr -d ' ')" \
      >>"$out/snakemake-cpu.tsv"
  done
) &
sampler=$!
# in the foreground, so that Ctrl-C and --seconds reach Snakemake (a background job of a
# script ignores SIGINT)
CUDA_VISIBLE_DEVICES="" "${limit[@]}" "${pin[@]}" "${PYTHON:-python}" -m snakemake --cores "$cores" "$@" \
  >"$out/snakemake.out" 2>&1
rc=$?
kill "$sampler" 2>/dev/null
wall=$((SECONDS - start))

log=$(newest)
[ "$log" = "$before" ] && log="" # this run wrote none
{
  echo "exit status $rc after $wall s; the Snakemake process's own CPU:" \
    "$(tail -1 "$out/snakemake-cpu.tsv" | cut -f2 | grep . || echo '?') s (last sample)"
  if [ -n "$log" ]; then
    cp "$log" "$out/snakemake.log"
    "${PYTHON:-python}" -m fedhet.cli timing "$log" ${against:+--against "$against"}
  else
    echo "no Snakemake log was written (see $out/snakemake.out)"
  fi
} 2>&1 | tee -a "$out/summary.txt"
exit "$rc"

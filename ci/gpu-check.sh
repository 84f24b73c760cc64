#!/usr/bin/env bash
# The GPU check, `fedhet gpu-check`: a CUDA smoke test and benchmark for a machine with one GPU,
# in at most four minutes, offline, with neither Snakemake nor an installed package: this script
# runs the command from the repository's src/ through PYTHONPATH. Its parts, their time limits,
# the results file and the exit status: `ci/gpu-check.sh --help`
# (src/fedhet/bench/gpucheck/check.py).
#
#   ci/gpu-check.sh [--cpu] [--out FILE] [--fmnist DIR] [--work DIR]
#
#   $PYTHON  the interpreter (default python3); it needs torch, torchvision, numpy, PyYAML and
#            pytest
set -euo pipefail

src=$(cd "$(dirname "$0")/../src" && pwd)
export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m fedhet.cli gpu-check "$@"

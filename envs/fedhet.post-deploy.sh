#!/usr/bin/env bash
# Run by Snakemake once, right after it creates the conda environment of envs/fedhet.yaml
# (`--sdm conda`), inside that environment and in the workflow's working directory (the
# repository root): install the fedhet package itself, without touching the conda packages.
set -euo pipefail
python -m pip install --no-deps --no-build-isolation -e .

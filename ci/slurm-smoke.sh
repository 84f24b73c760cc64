#!/usr/bin/env bash
# Run a workflow through a real (one-node) SLURM cluster and check that the training jobs ran as
# SLURM jobs.
#
#   ci/slurm-smoke.sh WORKFLOW_DIR TARGET... [-- EXTRA SNAKEMAKE ARGS...]
#   ci/slurm-smoke.sh --toy      # same checks on a built-in 5-job toy workflow in a temp dir
#
# WORKFLOW_DIR is where snakemake runs (it holds the Snakefile or workflow/Snakefile, and
# .snakemake/). Steps:
#   1. start the test cluster with ci/slurm-cluster.sh unless it is already running;
#   2. dry-run the targets with profiles/slurm and check that every training job asks for one GPU
#      (resources gpu=1, which the plugin turns into sbatch --gpus=1);
#   3. run the targets with profiles/slurm-ci (no GPU, squeue status checks) and a fresh SLURM
#      log directory;
#   4. check that every training job left a SLURM log named after its SLURM job id and that
#      SLURM reports that job COMPLETED;
#   5. stop the cluster on exit (also on failure) if step 1 started it.
#
# The training jobs must not be complete yet (or pass e.g. `-- --forcerun train`), otherwise
# there is nothing to check and the script fails.
#
# Environment knobs:
#   FEDHET_SMOKE_RULE         name of the training rule (default: train)
#   FEDHET_SMOKE_KEEP_CLUSTER set to 1 to leave a cluster started here running
#   FEDHET_SLURM_STATE_DIR    state dir of the cluster (see ci/slurm-cluster.sh)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CLUSTER="$HERE/slurm-cluster.sh"
PROFILE="$REPO/profiles/slurm"
PROFILE_CI="$REPO/profiles/slurm-ci"
RULE="${FEDHET_SMOKE_RULE:-train}"

log() { echo "[slurm-smoke] $*"; }
die() { echo "[slurm-smoke] FAILED: $*" >&2; exit 1; }

TOY=0
if [[ "${1:-}" == "--toy" ]]; then
    TOY=1
    WORKDIR="$(mktemp -d "${TMPDIR:-/tmp}/fedhet-slurm-toy.XXXXXX")"
    # prepare -> train x2 (gpu=1 like the real training rule) -> summarize (localrule)
    cat >"$WORKDIR/Snakefile" <<'EOF_SMK'
localrules: all, summarize

rule all:
    input: "results/summary.txt"

rule prepare:
    output: "results/data.txt"
    shell: "echo \"prepare slurm_job_id=${{SLURM_JOB_ID:-}}\" > {output}"

rule train:
    input: "results/data.txt"
    output: "results/model_{seed}.txt"
    resources:
        gpu=1,
        mem_mb=lambda wc, attempt: 2000 * attempt,
        runtime=lambda wc, attempt: 60 * attempt,
    shell: "echo \"slurm_job_id=${{SLURM_JOB_ID:-}}\" > {output}"

rule summarize:
    input: expand("results/model_{seed}.txt", seed=[0, 1])
    output: "results/summary.txt"
    shell: "cat {input} > {output}; echo \"summarize slurm_job_id=${{SLURM_JOB_ID:-}}\" >> {output}"
EOF_SMK
    set -- "$WORKDIR" all
    log "toy workflow in $WORKDIR"
fi
(($# >= 2)) || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
WORKDIR="$(cd "$1" && pwd)"
shift
TARGETS=()
EXTRA=()
while (($#)); do
    if [[ "$1" == "--" ]]; then
        shift
        EXTRA=("$@")
        break
    fi
    TARGETS+=("$1")
    shift
done
((${#TARGETS[@]} >= 1)) || die "no TARGET given"

# --- 1. cluster -------------------------------------------------------------------------------
STARTED=0
cleanup() {
    local rc=$?
    if ((STARTED)) && [[ "${FEDHET_SMOKE_KEEP_CLUSTER:-0}" != 1 ]]; then
        log "stopping the cluster started by this script"
        "$CLUSTER" stop || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if "$CLUSTER" status >/dev/null 2>&1; then
    log "SLURM cluster already running; it will be left running"
else
    t0=$SECONDS
    STARTED=1
    "$CLUSTER" start
    log "cluster started in $((SECONDS - t0)) s"
fi

cd "$WORKDIR"
SMK=(snakemake --workflow-profile none)

# --- 2. dry-run with the production profile ----------------------------------------------------
log "dry-run with $PROFILE"
dry="$(mktemp)"
if ! "${SMK[@]}" --profile "$PROFILE" -n "${TARGETS[@]}" "${EXTRA[@]}" >"$dry" 2>&1; then
    cat "$dry" >&2
    die "dry-run with profiles/slurm failed"
fi
# Each job block starts with "rule NAME:" (localrules print "localrule NAME:") and lists its
# resources on a "resources:" line.
read -r n_train n_gpu1 < <(awk -v rule="$RULE" '
    /^(local)?rule [^ ]+:$/ { in_rule = ($0 == "rule " rule ":"); if (in_rule) n++ ; next }
    in_rule && /^ +resources:/ { if ($0 ~ /[ ,]gpu=1(,|$)/) g++; in_rule = 0 }
    END { print n + 0, g + 0 }' "$dry")
rm -f "$dry"
log "dry-run: $n_train '$RULE' job(s), $n_gpu1 of them with gpu=1 (rendered as sbatch --gpus=1)"
((n_train >= 1)) || die "no '$RULE' job would run for ${TARGETS[*]}; use a clean directory or pass -- --forcerun $RULE"
((n_gpu1 == n_train)) || die "not every '$RULE' job requests gpu=1 with profiles/slurm"

# --- 3. run with the CI profile ------------------------------------------------------------------
mkdir -p .snakemake
LOGDIR="$(mktemp -d "$WORKDIR/.snakemake/slurm-smoke.XXXXXX")"
log "running ${TARGETS[*]} with $PROFILE_CI (SLURM logs: $LOGDIR)"
t0=$SECONDS
"${SMK[@]}" --profile "$PROFILE_CI" --slurm-logdir "$LOGDIR" "${TARGETS[@]}" "${EXTRA[@]}" \
    || die "snakemake run on SLURM failed (SLURM logs in $LOGDIR)"
log "workflow finished in $((SECONDS - t0)) s"

# --- 4. every training job ran as a SLURM job ------------------------------------------------------
mapfile -t logs < <(find "$LOGDIR/rule_$RULE" -type f -name '*.log' 2>/dev/null | sort)
((${#logs[@]} == n_train)) \
    || die "expected $n_train SLURM log(s) for rule '$RULE' under $LOGDIR/rule_$RULE, found ${#logs[@]}"
for f in "${logs[@]}"; do
    jobid="$(basename "$f" .log)"
    [[ "$jobid" =~ ^[0-9]+$ ]] || die "SLURM log $f is not named after a job id"
    state="$(squeue -h -t all -j "$jobid" -o '%T' 2>/dev/null || true)"
    [[ "$state" == COMPLETED ]] || die "SLURM job $jobid ($f) is in state '${state:-unknown}', not COMPLETED"
    log "rule $RULE: SLURM job $jobid COMPLETED (${f#"$WORKDIR"/})"
done
all_jobs="$(find "$LOGDIR" -type f -name '*.log' | wc -l)"
log "OK: $n_train '$RULE' job(s) ran under SLURM ($all_jobs SLURM job(s) in total)"

if ((TOY)); then
    # The toy's jobs write $SLURM_JOB_ID into their outputs: set in SLURM jobs, empty in localrules.
    for seed in 0 1; do
        grep -Eq '^slurm_job_id=[0-9]+$' "$WORKDIR/results/model_$seed.txt" \
            || die "results/model_$seed.txt carries no SLURM job id: $(cat "$WORKDIR/results/model_$seed.txt")"
    done
    grep -Eq '^prepare slurm_job_id=[0-9]+$' "$WORKDIR/results/data.txt" || die "prepare did not run under SLURM"
    grep -Eq '^summarize slurm_job_id=$' "$WORKDIR/results/summary.txt" || die "localrule summarize ran under SLURM"
    log "toy outputs: $(tr '\n' ' ' <"$WORKDIR/results/summary.txt")"
    cd "$REPO"
    rm -rf "$WORKDIR"
fi

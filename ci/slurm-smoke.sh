#!/usr/bin/env bash
# Run a workflow through a real (one-node) SLURM cluster and check that every job of every
# non-local rule ran as a SLURM job that ended COMPLETED.
#
#   ci/slurm-smoke.sh WORKFLOW_DIR TARGET... [-- EXTRA SNAKEMAKE ARGS...]
#   ci/slurm-smoke.sh --toy      # same checks on a built-in 5-job toy workflow in a temp dir
#
# WORKFLOW_DIR is where snakemake runs (it holds the Snakefile or workflow/Snakefile, and
# .snakemake/). Steps:
#   1. start the test cluster with ci/slurm-cluster.sh unless it is already running;
#   2. dry-run the targets with profiles/slurm and check that every training job, and every
#      other job that asks for GPUs, asks for one (gpu=1, which the plugin turns into
#      sbatch --gpus=1, sent to a GPU partition by profiles/slurm/partitions.yaml);
#   3. dry-run them with profiles/slurm-ci and FEDHET_JOB_GPUS=0 (the test node has no GPU) to
#      list the jobs of every non-local rule, then run them so, with a fresh SLURM log directory;
#   4. check that every one of those jobs left a SLURM log named after its SLURM job id and that
#      SLURM reports that job COMPLETED;
#   5. stop the cluster on exit (also on failure) if step 1 started it.
#
# The training jobs must not be complete yet (or pass e.g. `-- --forcerun train`), otherwise
# there is nothing to check and the script fails. ci/slurm-targets.py --every-rule prints targets
# with one job of every non-local rule of the workflow.
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
rule all:
    input: "results/summary.txt"
    localrule: True

rule prepare:
    output: "results/data.txt"
    shell: "echo \"prepare slurm_job_id=${{SLURM_JOB_ID:-}}\" > {output}"

rule train:
    input: "results/data.txt"
    output: "results/model_{seed}.txt"
    resources:
        gpu=int(__import__("os").environ.get("FEDHET_JOB_GPUS") or 1),
        mem_mb=lambda wc, attempt: 2000 * attempt,
        runtime=lambda wc, attempt: 60 * attempt,
    shell: "echo \"slurm_job_id=${{SLURM_JOB_ID:-}}\" > {output}"

rule summarize:
    input: expand("results/model_{seed}.txt", seed=[0, 1])
    output: "results/summary.txt"
    localrule: True
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
unset FEDHET_JOB_GPUS # step 2 checks the requests of the scale itself

# --- 2. dry-run with the production profile ----------------------------------------------------
log "dry-run with $PROFILE"
dry="$(mktemp)"
# the profile names its partition file relative to the repository root; WORKDIR may be another
if ! "${SMK[@]}" --profile "$PROFILE" --slurm-partition-config "$PROFILE/partitions.yaml" \
    -n "${TARGETS[@]}" "${EXTRA[@]}" >"$dry" 2>&1; then
    cat "$dry" >&2
    die "dry-run with profiles/slurm failed"
fi
# Each job block starts with "rule NAME:" (localrules print "localrule NAME:") and lists its
# resources on a "resources:" line.
# A job of a group (runs packed into one SLURM job) is printed indented, and asks for its GPU as
# gres=gpu:1 (taken once per group) instead of gpu=1 (summed over the group).
one_gpu='[ ,](gpu=1|gres=gpu:1)(,|$)'
read -r n_train n_gpu1 n_gpu n_gpu_other < <(awk -v rule="$RULE" -v one="$one_gpu" '
    /^ *(local)?rule [^ ]+:$/ {
        name = $0; sub(/^ +/, "", name); in_rule = (name == "rule " rule ":"); if (in_rule) n++
        job = 1; next
    }
    job && /^ +resources:/ {
        if (in_rule && $0 ~ one) g++
        if ($0 ~ /[ ,](gpu=[1-9][0-9]*|gres=gpu:[0-9]+)(,|$)/) { asked++; if ($0 !~ one) other++ }
        in_rule = 0; job = 0
    }
    END { print n + 0, g + 0, asked + 0, other + 0 }' "$dry")
rm -f "$dry"
log "dry-run: $n_train '$RULE' job(s), $n_gpu1 of them with one GPU (sbatch --gpus=1 or --gres=gpu:1);" \
    "$n_gpu job(s) in all ask for GPUs"
((n_train >= 1)) || die "no '$RULE' job would run for ${TARGETS[*]}; use a clean directory or pass -- --forcerun $RULE"
((n_gpu1 == n_train)) || die "not every '$RULE' job requests one GPU with profiles/slurm"
((n_gpu_other == 0)) || die "$n_gpu_other job(s) ask for a GPU count other than 1 with profiles/slurm"

# --- 3. the jobs of every non-local rule, as the CI profile will run them ------------------------
export FEDHET_JOB_GPUS=0 # the test node has no GPU: no job asks for one
dry="$(mktemp)"
if ! "${SMK[@]}" --profile "$PROFILE_CI" -n "${TARGETS[@]}" "${EXTRA[@]}" >"$dry" 2>&1; then
    cat "$dry" >&2
    die "dry-run with profiles/slurm-ci failed"
fi
# the rules that run as cluster jobs (dry-runs print local and cluster jobs alike as "rule X:")
mapfile -t cluster_rules < <(python "$HERE/nonlocal-rules.py" "$WORKDIR")
((${#cluster_rules[@]} >= 1)) || die "could not list the non-local rules of $WORKDIR"
declare -A expected=()
while read -r rule count; do
    for r in "${cluster_rules[@]}"; do
        [[ "$r" == "$rule" ]] && expected[$rule]=$count
    done
done < <(awk '/^ *rule [^ ]+:$/ { sub(/^ *rule /, ""); sub(/:$/, ""); n[$0]++ }
    END { for (r in n) print r, n[r] }' "$dry")
if grep -Eq '[ ,]gpu=[1-9]' "$dry"; then
    rm -f "$dry"
    die "a job asks for a GPU with profiles/slurm-ci and FEDHET_JOB_GPUS=0"
fi
rm -f "$dry"
((${#expected[@]} >= 1)) || die "no non-local job would run for ${TARGETS[*]}"
log "jobs to submit: $(for r in "${!expected[@]}"; do printf '%s×%s ' "$r" "${expected[$r]}"; done)"

# --- 3b. run with the CI profile -----------------------------------------------------------------
mkdir -p .snakemake
LOGDIR="$(mktemp -d "$WORKDIR/.snakemake/slurm-smoke.XXXXXX")"
log "running ${TARGETS[*]} with $PROFILE_CI (SLURM logs: $LOGDIR)"
t0=$SECONDS
"${SMK[@]}" --profile "$PROFILE_CI" --slurm-logdir "$LOGDIR" "${TARGETS[@]}" "${EXTRA[@]}" \
    || die "snakemake run on SLURM failed (SLURM logs in $LOGDIR)"
log "workflow finished in $((SECONDS - t0)) s"

# --- 4. every job of every non-local rule ran as a SLURM job ----------------------------------------
total=0
# A job of a group (the training runs the profiles pack) ran inside its group's SLURM job, logged
# under group_<group>_<rule>/: that log ends with "N of N steps (100%) done", N its jobs.
for rule in $(printf '%s\n' "${!expected[@]}" | sort); do
    mapfile -t logs < <(find "$LOGDIR/rule_$rule" -type f -name '*.log' 2>/dev/null | sort)
    mapfile -t group_logs < <(find "$LOGDIR" -path "$LOGDIR/group_*_$rule/*.log" -type f | sort)
    ran=${#logs[@]}
    for f in "${group_logs[@]}"; do
        n=$(grep -E '^[0-9]+ of [0-9]+ steps \(100%\) done' "$f" | tail -1 | awk '{print $3}')
        [[ -n "$n" ]] || die "group log $f does not say that its jobs all finished"
        log "rule $rule: $n job(s) packed into one SLURM job (${f#"$WORKDIR"/})"
        ran=$((ran + n))
    done
    ((ran == expected[$rule])) \
        || die "expected ${expected[$rule]} SLURM job(s) of rule '$rule' under $LOGDIR, found $ran"
    for f in "${logs[@]}" "${group_logs[@]}"; do
        jobid="$(basename "$f" .log)"
        [[ "$jobid" =~ ^[0-9]+$ ]] || die "SLURM log $f is not named after a job id"
        state="$(squeue -h -t all -j "$jobid" -o '%T' 2>/dev/null || true)"
        [[ "$state" == COMPLETED ]] || die "SLURM job $jobid ($f) is in state '${state:-unknown}', not COMPLETED"
        log "rule $rule: SLURM job $jobid COMPLETED (${f#"$WORKDIR"/})"
    done
    total=$((total + ran))
done
log "OK: $total job(s) of ${#expected[@]} non-local rule(s) ran under SLURM and COMPLETED" \
    "($n_train of rule '$RULE')"

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

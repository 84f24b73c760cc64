# Helpers shared by the rules: config validation, the run table (fedhet.experiments), paths of
# every output and the input/params functions of the rules.
import copy
import functools
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from fedhet import catalog, names, papers
from fedhet import experiments as X
from fedhet.experiments import challengers
from fedhet.config import ConfigError
from fedhet.figures.kinds import FIGURE_KINDS
from fedhet.local import gpushare
from fedhet.local.launcher import NotStarted as ForkServerNotStarted
from fedhet.local.launcher import command_mismatch, start_server, stop_server
from fedhet.local.protocol import ENV as FORKSERVER_ENV

ROOT = Path(workflow.basedir)
SCHEMAS = ROOT / "workflow" / "schemas"


def shown_path(path):
    """A config file as the user named it: relative to the working directory when inside it."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def config_origin(keys):
    """Where the workflow config's value at `keys` (a key path; its top-level key decides)
    came from: `--config` when set there, else the last --configfile that sets it, else
    config/config.yaml (Snakemake merges them in this order)."""
    if not keys:
        return "config/config.yaml"
    settings = workflow.config_settings
    given = dict(settings.config or {})
    if keys[0] in given:
        value = given[keys[0]]
        shown = value if isinstance(value, (str, int, float)) else "..."
        return f"--config {keys[0]}={shown}"
    for path in reversed(list(settings.configfiles or [])):
        if keys[0] in X.read_yaml(path):
            return shown_path(path)
    return "config/config.yaml"


def config_origins():
    """Top-level key of the workflow config → the file (or --config) it came from."""
    return {key: config_origin([key]) for key in config}


def validate_file(data, schema, file):
    """Schema-check one config file; errors name the file and the key (`file`: its name, or
    a function of the bad key's path that names the file it came from)."""
    try:
        validate(data, schema=str(SCHEMAS / schema))
    except WorkflowError:
        import jsonschema

        schema_doc = yaml.safe_load((SCHEMAS / schema).read_text())
        error = jsonschema.validators.validator_for(schema_doc)(schema_doc)
        worst = jsonschema.exceptions.best_match(error.iter_errors(data))
        key = ".".join(str(p) for p in worst.absolute_path) or "(top level)"
        where = file(list(worst.absolute_path)) if callable(file) else file
        raise WorkflowError(
            f"{where}: invalid setting '{key}': {worst.message}"
        ) from None


def load_and_validate():
    """Validate config.yaml, the scale file and every paper file, then expand the experiment
    (with this scale's leaderboards on disk: `fedhet.experiments.challengers`)."""
    validate_file(config, "config.schema.yaml", config_origin)
    scale_file = ROOT / "config" / "scales" / f"{config['scale']}.yaml"
    if not scale_file.exists():
        valid = sorted(p.stem for p in scale_file.parent.glob("*.yaml"))
        raise WorkflowError(
            f"{config_origin(['scale'])}: unknown scale '{config['scale']}'; valid: "
            f"{', '.join(valid)}"
        )
    validate_file(
        X.read_yaml(scale_file),
        "scale.schema.yaml",
        f"config/scales/{scale_file.name}",
    )
    for paper in X.PAPERS:
        path = ROOT / "config" / "papers" / f"{paper}.yaml"
        if path.exists():
            validate_file(
                X.read_yaml(path),
                "paper.schema.yaml",
                f"config/papers/{path.name}",
            )
    try:
        return X.load_experiment(
            config,
            ROOT,
            origins=config_origins(),
            results=f"results/{config['scale']}",
        )
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


EXP = load_and_validate()
SCALE = EXP.scale
RES = EXP.scale_config["resources"]


# $FEDHET_JOB_GPUS: GPUs each GPU job asks for, whatever the scale says or this machine shows
GPUS_GIVEN = os.environ.get("FEDHET_JOB_GPUS", "").strip()


def gpus_per_job():
    """GPUs each GPU job (training, calibration) asks for: the scale's `resources.gpu`, or
    $FEDHET_JOB_GPUS where set (0 on a cluster or machine without GPUs: the code then runs on
    the CPU). Profiles route jobs by this request, never by rule name."""
    if not GPUS_GIVEN:
        return int(RES["gpu"])
    if not GPUS_GIVEN.isdigit():
        raise WorkflowError(
            f"FEDHET_JOB_GPUS must be a whole number of GPUs, got {GPUS_GIVEN!r}"
        )
    return int(GPUS_GIVEN)


JOB_GPUS = gpus_per_job()


@functools.cache
def visible_gpu_ids():
    """GPUs this machine shows its jobs (CUDA_VISIBLE_DEVICES entries), found without
    importing torch: none where $CUDA_VISIBLE_DEVICES hides them or `nvidia-smi` is missing
    or lists none."""
    return gpushare.visible_devices()


def visible_gpus():
    return len(visible_gpu_ids())


def job_gpus(wildcards):
    """Resource `gpu` of a GPU job: JOB_GPUS, but none without $FEDHET_JOB_GPUS when the job
    runs on this machine and this machine shows no GPU (the job then runs on the CPU). A
    cluster run, and a dry run, show what a cluster job asks for."""
    local = workflow.local_exec and not workflow.dryrun
    if local and not GPUS_GIVEN and not visible_gpus():
        return 0
    return JOB_GPUS


# On a cluster, the SLURM profile can pack K training jobs into one cluster job on one GPU:
# `groups: train=gpu_runs` and `group-components: gpu_runs=K` (Snakemake's job groups). The SLURM
# executor plugin runs a group's jobs one after another (`--jobs 1` in the group job), so K runs
# take turns on the GPU. Locally groups have no effect.


def packed_runs():
    """Training jobs one cluster job holds: the `--group-components` size of the group that
    `--groups` puts `train` in, 1 when ungrouped. Snakemake hands group settings to the workflow
    after parsing, so this is for resource functions, not for parse-time code."""
    settings = workflow.group_settings
    group = settings.overwrite_groups.get("train") if settings else None
    runs = settings.group_components.get(group, 1) if group else 1
    if int(runs) < 1:
        raise WorkflowError(
            f"--group-components {group}={runs}: runs per cluster job must be at least 1"
        )
    return int(runs)


def packed_submission():
    """True where training jobs go to a cluster K to a GPU (or a dry run shows them): each asks
    for no `gpu` of its own but for `gres` gpu:N, which their group asks for once (Snakemake
    sums numbers over a group, which would ask for K GPUs, and takes a string once)."""
    return packed_runs() > 1 and bool(JOB_GPUS) and workflow.non_local_exec_or_dryrun


def job_gpu_resource(wildcards):
    """Resource `gpu` of a training job (job_gpus), none when packed for a cluster."""
    return 0 if packed_submission() else job_gpus(wildcards)


def job_gres(wildcards):
    """Resource `gres` of a training job: gpu:N when packed for a cluster, else unset."""
    return f"gpu:{JOB_GPUS}" if packed_submission() else None


# GPU jobs that may share one GPU of this machine: the config's, else the scale's (default 1)
RUNS_PER_GPU = int(config.get("runs_per_gpu") or RES.get("runs_per_gpu", 1))


def share_gpus():
    """A run on this machine with GPUs: at most visible GPUs × runs_per_gpu GPU jobs at once
    (unless `--resources gpu=N` says otherwise), each with a share of its own; the jobs'
    `fedhet` commands claim it from the plan in $FEDHET_GPU_SHARES (fedhet.local.gpushare),
    whether the fork server runs them or not. A cluster gives each job its GPUs; a cluster
    job running a group of jobs shares out the GPUs it was given the same way."""
    if workflow.subprocess_exec:
        return  # a job of a run on this machine: that run's plan holds
    for name in (gpushare.PLAN_ENV, gpushare.SLOTS_ENV):
        os.environ.pop(name, None)  # never a plan of another run
    local = workflow.local_exec and not workflow.dryrun
    devices = visible_gpu_ids() if local else []
    if not devices or not JOB_GPUS:
        return
    if JOB_GPUS > len(devices):
        raise WorkflowError(
            f"GPU jobs ask for {JOB_GPUS} GPUs each but this machine shows {len(devices)}; "
            f"set FEDHET_JOB_GPUS (or the scale's resources.gpu) to at most {len(devices)}"
        )
    if "gpu" not in workflow.global_resources:
        workflow.register_resource("gpu", len(devices) * RUNS_PER_GPU)
    directory = gpushare.default_directory()
    if not workflow.is_main_process:  # a cluster job: the GPUs of its allocation only
        directory = directory.with_name(f"{directory.name}-job{os.getpid()}")
    plan = gpushare.Plan(devices, RUNS_PER_GPU, JOB_GPUS, str(directory))
    os.environ[gpushare.PLAN_ENV] = plan.to_env()


share_gpus()


FORKSERVER = {}  # the running fork server's process, under "process"
FORKSERVER_LOG = ".snakemake/log/fedhet-forkserver.log"


def start_forkserver():
    """Start `python -m fedhet.local.server` for the jobs of this run on this machine, as many
    at once as Snakemake runs, and point them at it ($FEDHET_FORKSERVER, told by the server); it
    exits with this Snakemake process. Not for jobs sent to a cluster, nor with
    `forkserver: false`."""
    if not workflow.local_exec or not config["forkserver"]:
        return
    os.makedirs(os.path.dirname(FORKSERVER_LOG), exist_ok=True)
    jobs = workflow.resource_settings.cores or os.cpu_count() or 1
    try:
        server = start_server(FORKSERVER_LOG, max_jobs=jobs, watch_pid=os.getpid())
    except ForkServerNotStarted as err:
        logger.warning(
            f"fedhet fork server did not start: {err} ({FORKSERVER_LOG}); "
            "every job imports torch itself"
        )
        return
    FORKSERVER["process"] = server.process
    os.environ[FORKSERVER_ENV] = server.address
    mismatch = command_mismatch()
    if mismatch:
        logger.warning(
            f"fedhet fork server: the jobs' fedhet is another installation ({mismatch}); "
            "the server will decline every job and each imports torch itself (slower). "
            "Run snakemake from the environment fedhet is installed in."
        )


def stop_forkserver():
    server = FORKSERVER.pop("process", None)
    if server is not None:
        stop_server(server)


def cancel_reselection_timers():
    """Cancel Snakemake's pending re-selections: after each job selection it starts a
    threading.Timer that selects again once the job-rate window (profiles/default: a minute)
    has passed. At the workflow's end none has anything left to select, but Python waits for
    each before the process exits."""
    for thread in threading.enumerate():
        if type(thread) is threading.Timer:
            thread.cancel()


# At the process's exit, however the workflow ended (done, failed, or interrupted: Ctrl-C runs
# neither onsuccess nor onerror): Python calls these before it waits for the threads still
# running (threading._register_atexit, the hook concurrent.futures uses for the same reason).
threading._register_atexit(cancel_reselection_timers)


ITEMS = EXP.items
TABLE_IDS = sorted({i.id for i in ITEMS.values() if not i.is_figure})
FIGURE_IDS = sorted({i.id for i in ITEMS.values() if i.is_figure})
PAPERS_WITH_ITEMS = sorted({i.paper for i in ITEMS.values()})


def alternation(names):
    """Regex of exactly these names (wildcard constraints); never empty."""
    return "|".join(sorted(names)) or "(?!)"


def item_outputs(target):
    """Files a table or figure target (<paper>_<id>) consists of."""
    item = ITEMS[target]
    if item.is_figure:
        return [f"results/{SCALE}/figures/{item.paper}/{item.id}.png"]
    base = f"results/{SCALE}/tables/{item.paper}/{item.id}"
    return [f"{base}.csv", f"{base}.md", f"{base}.html"]


def paper_outputs(paper):
    out = []
    for item in EXP.items_of(paper):
        out.extend(item_outputs(item.target))
    return out


def scorecard_outputs():
    base = f"results/{SCALE}/scorecard"
    return [f"{base}.csv", f"{base}.md", f"{base}.html"]


def run_outputs(run_id):
    base = f"results/{SCALE}/runs/{run_id}"
    return [f"{base}/final.json", f"{base}/metrics.jsonl"]


def all_results():
    """Everything `snakemake` builds for the papers in config['papers'], plus the scorecard
    and, with challengers configured, their leaderboards."""
    out = []
    for paper in config["papers"]:
        out.extend(paper_outputs(paper))
    return out + scorecard_outputs() + all_leaderboards()


def all_targets():
    out = all_results()
    if config["report_after_run"]:
        out.append(f"reports/{SCALE}/report.html")
    return out


def ci_targets():
    """`snakemake ci`: a few whole tables/figures, the runs of selected cells and the
    scorecard of the claims those tables check (its report looks like the full one)."""
    items, run_ids = ci_items()
    out = [f"results/{SCALE}/ci/scorecard.{ext}" for ext in ("csv", "md", "html")]
    for target in items:
        out.extend(item_outputs(target))
    for run_id in run_ids:
        out.extend(run_outputs(run_id))
    return out


def unknown_target(wildcards):
    """Input function of the catch-all rule: an unknown target name."""
    valid = sorted([*ITEMS, *X.PAPERS, "all", "ci", "results", "leaderboard"])
    raise WorkflowError(
        f"unknown target '{wildcards.target}'; valid targets: {', '.join(valid)}"
    )


# ----------------------------------------------------------------------------- data


def dataset_name(wildcards):
    return EXP.datasets[wildcards.dataset_key]["name"]


def dataset_options(wildcards):
    return json.dumps(EXP.datasets[wildcards.dataset_key]["options"], sort_keys=True)


def dataset_download_flag(wildcards):
    """Real datasets are downloaded on first use; stand-ins are built offline."""
    name = EXP.datasets[wildcards.dataset_key]["name"]
    return "" if name in names.standin_datasets() else "--download"


def partition_dataset(wildcards):
    return f"resources/datasets/{EXP.partitions[wildcards.partition_key]['dataset_key']}.path"


def partition_params(wildcards):
    job = EXP.partitions[wildcards.partition_key]
    return {
        "dataset": job["dataset"],
        "options": json.dumps(job["options"], sort_keys=True),
        "flags": X.partition_args(job),
    }


# ----------------------------------------------------------------------------- training


def partition_file(run_id):
    key = EXP.run_partition.get(run_id)
    return None if key is None else f"resources/partitions/{key}.npz"


def train_inputs(wildcards):
    """The dataset (and, for federated runs, the partition file) a run trains on, plus the
    further datasets and cached artefacts its methods read (fedhet.experiments.jobs)."""
    rid = wildcards.run_id
    inputs = {"dataset": f"resources/datasets/{EXP.run_dataset[rid]}.path"}
    for i, key in enumerate(EXP.run_extra_datasets.get(rid, [])):
        inputs[f"extra_dataset_{i}"] = f"resources/datasets/{key}.path"
    part = partition_file(rid)
    if part is not None:
        inputs["partition"] = part
    for i, aid in enumerate(EXP.run_artefacts.get(rid, [])):
        inputs[f"artefact_{i}"] = f"resources/datasets/{aid}.pt"
    return inputs


def train_run_json(wildcards, output):
    """The resolved run for `fedhet train --config-json`, pointing at its partition file.
    Taking `output` makes Snakemake leave this param out of its params rerun trigger: the
    identity is already in the run id (the path), and paths or runtime settings (device,
    checkpoint cadence) must not retrain."""
    run = copy.deepcopy(EXP.runs[wildcards.run_id])
    part = partition_file(wildcards.run_id)
    if part is not None:
        run["partition"]["file"] = part
    workers = run["runtime"]["client_workers"]
    if workers > 1 and not run["runtime"]["threads"]:
        # the job's cores shared among the clients that train at once
        run["runtime"]["threads"] = max(1, RES["threads"] // workers)
    return json.dumps(run, sort_keys=True, separators=(",", ":"))


def train_mem_mb(wildcards, attempt):
    return int(RES["mem_mb"] * attempt)


def train_runtime(wildcards, attempt):
    """Minutes: base + per-epoch × passes over the training set, × attempt on retries; × K
    when packed K to a cluster job, whose runs take turns (a group asks for its longest job's
    time)."""
    run = EXP.runs[wildcards.run_id]
    minutes = RES["runtime_base"] + RES["runtime_per_epoch"] * X.dataset_epochs(run)
    turns = packed_runs() if packed_submission() else 1
    return int(math.ceil(minutes * attempt * turns))


# ----------------------------------------------------------------------------- tables, figures


def item_of(wildcards, kind):
    target = f"{wildcards.paper}_{wildcards[kind]}"
    if target not in ITEMS:
        raise WorkflowError(
            f"unknown {kind} '{target}'; valid: "
            + ", ".join(
                t for t, i in ITEMS.items() if i.is_figure == (kind == "figure")
            )
        )
    return ITEMS[target]


def calibration_output(calibration_id):
    """calibration.json of a post-hoc step (`<run_id>/<key>`, CCVR; workflow/rules/ccvr.smk)."""
    return f"results/{SCALE}/calibrations/{calibration_id}/calibration.json"


def table_inputs(wildcards):
    item = item_of(wildcards, "table")
    runs = [f for rid in item.run_ids() for f in run_outputs(rid)]
    return runs + [calibration_output(cid) for cid in item.calibration_ids()]


def table_payload(wildcards):
    return item_of(wildcards, "table").payload()


def report_category(wildcards):
    """The report's sidebar entry of a table's or figure's paper, in paper order."""
    return papers.report_category(wildcards.paper)


def report_labels(wildcards):
    """The report's sidebar row of a table or figure: sorted in paper order, with its title."""
    kind = "figure" if "figure" in wildcards.keys() else "table"
    item = item_of(wildcards, kind)
    return {kind: papers.item_label(item.id, item.spec.get("title", item.id))}


def figure_ids(local):
    """Wildcard constraint of the figures whose kind runs locally (or as a job): `<id>` after
    `<paper>/` in the output path, for every (paper, id) of such a kind."""
    ids = [
        f"(?<=/{i.paper}/){i.id}"
        for i in ITEMS.values()
        if i.is_figure and FIGURE_KINDS.get(i.kind).local == local
    ]
    return "|".join(sorted(ids)) or "(?!)"


def figure_kind(wildcards):
    return FIGURE_KINDS.get(item_of(wildcards, "figure").kind)


def figure_inputs(wildcards):
    """What the figure's kind reads (fedhet.figures.kinds)."""
    item = item_of(wildcards, "figure")
    try:
        return FIGURE_KINDS.get(item.kind).inputs(item, EXP, f"results/{SCALE}")
    except ValueError as err:
        raise WorkflowError(str(err)) from None


def figure_payload(wildcards):
    return item_of(wildcards, "figure").payload()


# ----------------------------------------------------------------------------- artefacts, post-hoc

POSTHOC_METHODS = catalog.names("posthoc")


def artefact_keys(family):
    return [a["key"] for a in EXP.artefacts.values() if a["family"] == family]


# the artefact families some configured run reads (one rule each; a family no run uses yet,
# such as FedLGD's before its tables exist, has no rule)
ARTEFACT_FAMILIES = {
    name: family
    for name, family in catalog.artefact_families().items()
    if artefact_keys(name)
}


def artefact_sources(family, key):
    """Prepared datasets an artefact's build reads (e.g. a real-image virtual source)."""
    return [
        f"resources/datasets/{d}.path"
        for d in EXP.artefacts[f"{family}/{key}"]["sources"]
    ]


def artefact_settings(family, key):
    return json.dumps(
        EXP.artefacts[f"{family}/{key}"]["settings"],
        sort_keys=True,
        separators=(",", ":"),
    )


def calibration_settings(wildcards, output):
    """`fedhet calibrate --settings` JSON. Taking `output` keeps this param out of Snakemake's
    rerun triggers: the settings that change the result are in the key (the path); the device
    is not."""
    cid = f"{wildcards.run_id}/{wildcards.calibration_key}"
    if cid not in EXP.calibrations:
        raise WorkflowError(
            f"unknown calibration '{cid}'; no table or figure of this scale asks for it"
        )
    settings = dict(EXP.calibrations[cid]["settings"])
    settings["device"] = EXP.scale_config.get("runtime", {}).get("device", "auto")
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def scenario_note():
    """One line saying what this scale is (the report's introduction; each table and figure
    says what its own runs changed, fedhet.experiments.scale_notes): the scale's description,
    and its share of the papers' rounds read from its own `rounds` setting, with the papers
    whose own keys bound their rounds otherwise."""
    scale = EXP.scale_config
    text = " ".join(str(scale.get("description", "")).split()).rstrip(".")
    if float(scale["rounds"]["factor"]) == 1.0:
        return f"{text}."
    terms = rounds_terms(scale["rounds"])
    bounds = [", ".join(term for key, term in terms.items() if key != "factor")]
    for name in config["papers"]:
        own = rounds_terms(X.scale_for_paper(EXP.scale_config, name)["rounds"])
        differ = [term for key, term in own.items() if terms.get(key) != term]
        if differ:
            bounds.append(f"{papers.paper_name(name)}: {', '.join(differ)}")
    return f"{text}; {terms['factor']} of the papers' rounds ({'; '.join(bounds)})."


def rounds_terms(rounds):
    """How a scale's `rounds` cuts the papers' rounds: "2%", "at least 5", "at most 100"."""
    terms = {"factor": f"{100 * float(rounds['factor']):g}%"}
    terms["min"] = f"at least {rounds['min']}"
    if rounds.get("max"):
        terms["max"] = f"at most {rounds['max']}"
    return terms


# the report's introduction says the same (reports/workflow.rst), under the scale's warning
config["scale_note"] = scenario_note()
config["scale_warning"] = " ".join(str(EXP.scale_config["warning"]).split())
# whether a difference from a paper's number means something at this scale: the tables print it
# in their cells only then (their CSVs always keep it), and the report's texts say which
COMPARABLE = bool(EXP.scale_config.get("comparable", True))
config["scale_comparable"] = COMPARABLE


def item_note(kind):
    """Params function: what a table's or figure's own runs changed from the paper at this
    scale, in words (fedhet.experiments.scale_notes): a figure's as one paragraph (the first of
    its notes), a table's a sentence per part (its page folds the methods' settings)."""
    if kind == "table":
        return lambda wildcards: item_of(wildcards, kind).scale_change_parts
    return lambda wildcards: item_of(wildcards, kind).scale_changes


# Params of the figure rules (workflow/rules/figures.smk).
FIGURE_PARAMS = {
    "payload": figure_payload,
    "note": item_note("figure"),
    "script": lambda wildcards: figure_kind(wildcards).script,
    "caption": lambda wildcards: figure_kind(wildcards).caption,
    "results": f"results/{SCALE}",
    "device": EXP.scale_config.get("runtime", {}).get("device", "auto"),
}


def ci_items():
    """The whole tables and figures of the `ci` target (config.yaml → ci.targets)."""
    try:
        return X.ci_selection(EXP, config.get("ci") or {})
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


def claim_targets(claim):
    """The tables (<paper>_<id>) one claim compares."""
    return {f"{claim['paper']}_{claim[side]['table']}" for side in ("better", "than")}


def scorecard_claims(selection):
    """Claims of a scorecard: of every built paper ("all"), or those whose tables the `ci`
    target builds whole ("ci")."""
    claims = [c for c in EXP.claims() if c["paper"] in config["papers"]]
    if selection == "ci":
        built = set(ci_items()[0])
        claims = [c for c in claims if claim_targets(c) <= built]
    return claims


def scorecard_tables(selection):
    """Input function: the long tables (CSV) the claims of a scorecard compare."""

    def tables(wildcards):
        targets = {t for c in scorecard_claims(selection) for t in claim_targets(c)}
        return sorted(
            f"results/{SCALE}/tables/{ITEMS[t].paper}/{ITEMS[t].id}.csv"
            for t in targets
        )

    return tables


def scorecard_payload(selection):
    """Params function: the claims of a scorecard, their tables' payloads and the scale's
    warning (the scorecard repeats it)."""

    def payload(wildcards):
        claims = scorecard_claims(selection)
        targets = {t for c in claims for t in claim_targets(c)}
        content = {
            "claims": claims,
            # with the cells this scale does not run, so that a claim's verdict says which
            # part of it was tested, and what the cells ran on (stand-ins)
            "payloads": {t: ITEMS[t].claim_payload() for t in sorted(targets)},
            "seeds": EXP.seeds,
            "warning": config["scale_warning"],
            "tie_margin": tie_margin(),
        }
        return X.Payload(content, f"{len(claims)} claims of config/papers/*.yaml")

    return payload


def tie_margin():
    """Within how much two means tie (config.yaml → leaderboard.tie_margin): the leaderboard's
    and the scorecard's margin."""
    from fedhet.tables.maths import TIE_MARGIN

    return float((config.get("leaderboard") or {}).get("tie_margin", TIE_MARGIN))


# The scorecard's entry in the report's sidebar: first, before the papers'.
SCORECARD_CATEGORY = papers.SCORECARD_CATEGORY
SCORECARD_LABELS = {"page": "the papers' claims checked on our numbers"}


def report_config():
    """Config (YAML) that makes the report's own Snakemake call see this DAG. Without the
    challengers: when the report runs, every entry's leaderboard is built, and that call keeps
    them all from disk (with the tie margin each was built with), so that the report of a
    later plain `snakemake` is the same and is not rebuilt."""
    keys = {"scale": SCALE, "seeds": EXP.seeds, "papers": list(config["papers"])}
    keys["skip_plugins"] = list(config.get("skip_plugins") or [])
    return yaml.safe_dump(keys, default_flow_style=True).strip()


# The report's landing text (its title, the scale's warning, how to read the tables).
REPORT_TEXT = "reports/workflow.rst"


# ----------------------------------------------------------------------------- leaderboard
# `snakemake leaderboard --configfile mine.yaml`: each entry of config['challengers'] added to
# every comparable table of config['papers'] (fedhet.experiments.challengers), and ranked; the
# entries of leaderboards built before under results/<scale>/leaderboard/ that the config does
# not name are kept while they are what they were built from (their report entries stay).

BOARDS = EXP.leaderboard
CHALLENGERS = sorted(BOARDS)
LEADERBOARD = f"results/{SCALE}/leaderboard"


def leaderboard_outputs(name):
    """Files of one entry's leaderboard: each comparable table with it, the ranking and what
    the entry is (entry.json)."""
    base = f"{LEADERBOARD}/{name}"
    out = [f"{base}/leaderboard.{ext}" for ext in ("csv", "md", "html")]
    out += [f"{base}/cells.csv", f"{base}/entry.json"]
    for item in BOARDS[name].items.values():
        out.extend(
            f"{base}/{item.paper}/{item.id}.{ext}" for ext in ("csv", "md", "html")
        )
    return out


def overview_outputs():
    """The entries side by side (with any entry)."""
    if not CHALLENGERS:
        return []
    return [f"{LEADERBOARD}/overview.{ext}" for ext in ("csv", "md", "html")]


def all_leaderboards():
    out = [path for name in CHALLENGERS for path in leaderboard_outputs(name)]
    return out + overview_outputs()


def leaderboard_targets(wildcards):
    """Input function of the `leaderboard` target, every entry's leaderboard, the overview and
    the report."""
    if not CHALLENGERS:
        raise WorkflowError(
            "snakemake leaderboard: no challenger configured; name your method in a YAML file, "
            "e.g. mine.yaml with `challengers: [{name: mine, label: Mine}]`, and run "
            "snakemake leaderboard --configfile mine.yaml (`fedhet methods` lists the "
            "installed methods)"
        )
    out = all_leaderboards()
    if config["report_after_run"]:
        out.append(f"reports/{SCALE}/report.html")
    return out


def board_item(wildcards):
    """A comparable table with a challenger added (wildcards challenger, paper, table)."""
    board = BOARDS[wildcards.challenger]
    target = f"{wildcards.paper}_{wildcards.table}"
    if target not in board.items:
        raise WorkflowError(
            f"no leaderboard table '{target}' for challenger {wildcards.challenger}; "
            f"valid: {', '.join(board.items)}"
        )
    return board.items[target]


def board_table_inputs(wildcards):
    item = board_item(wildcards)
    runs = [f for rid in item.run_ids() for f in run_outputs(rid)]
    return runs + [calibration_output(cid) for cid in item.calibration_ids()]


def board_table_payload(wildcards):
    return board_item(wildcards).payload()


def board_category(wildcards):
    """The report's sidebar entry of a challenger's leaderboard, after the papers'."""
    return papers.leaderboard_category(BOARDS[wildcards.challenger].challenger.label)


def board_table_labels(wildcards):
    item = board_item(wildcards)
    return {"table": papers.item_label(item.id, item.spec.get("title", item.id))}


def board_inputs(wildcards):
    """What a challenger's ranking reads: its tables, and every run's results, settings (its
    training work) and calibrations."""
    board = BOARDS[wildcards.challenger]
    base = f"{LEADERBOARD}/{wildcards.challenger}"
    tables = [f"{base}/{i.paper}/{i.id}.csv" for i in board.items.values()]
    runs = []
    for rid in board.run_ids():
        runs.extend(run_outputs(rid))
        runs.append(f"results/{SCALE}/runs/{rid}/resolved.yaml")
    cids = {c for i in board.items.values() for c in i.calibration_ids()}
    return {
        "tables": tables,
        "runs": runs,
        "calibrations": [calibration_output(c) for c in sorted(cids)],
    }


def board_payload(wildcards):
    """Params function: the entry (what it is: method, package, version, code hash, settings;
    and what it was built from: entry.json), each comparable table's payload with the axis it
    joined and the metric scored, the tie margin and the scale's warning."""
    board = BOARDS[wildcards.challenger]
    tables = []
    for target, item in board.items.items():
        join = board.joins[target]
        seeds = [int(s) for s in item.spec.get("seeds") or EXP.seeds]
        tables.append(
            {
                "payload": item.payload(),
                "axis": join.axis,
                "metric": join.metric,
                "seeds": seeds,
            }
        )
    ch = board.challenger
    content = {
        "challenger": {"name": ch.name, "label": ch.label, "kind": ch.kind},
        "entry": challengers.manifest(board, SCALE, EXP.seeds),
        "about": challengers.about_text(ch),
        "tables": tables,
        "tie_margin": board.tie_margin,
        "warning": config["scale_warning"],
    }
    return X.Payload(content, f"{ch.name}: {len(tables)} comparable tables")


def overview_inputs(wildcards):
    """Every entry's ranking and cells (the overview's rows)."""
    return {
        "rankings": [f"{LEADERBOARD}/{n}/leaderboard.csv" for n in CHALLENGERS],
        "cells": [f"{LEADERBOARD}/{n}/cells.csv" for n in CHALLENGERS],
    }


def overview_payload(wildcards):
    """Params function: what each entry is (`challengers.about`), in the order of the inputs."""
    entries = []
    for name in CHALLENGERS:
        board = BOARDS[name]
        papers_of = list(dict.fromkeys(j.paper for j in board.joins.values()))
        entries.append(challengers.about(board.challenger, papers_of))
    content = {"entries": entries, "warning": config["scale_warning"]}
    return X.Payload(content, f"{len(entries)} leaderboard entries")


def announce_leaderboard():
    """Before anything runs, also under -n (at parse time: Snakemake runs `onstart` only for a
    real run): the leaderboards on disk left out and why, and per entry the runs it adds that
    are not built yet, their training work and GPU-hours (`fedhet cost`'s model), and the
    baseline runs still to train. Not in jobs, nor in the report's own Snakemake run."""
    if workflow.subprocess_exec or "--report" in sys.argv:
        return
    for name, why in sorted(EXP.leaderboard_left_out.items()):
        logger.warning(
            f"leaderboard {LEADERBOARD}/{name}/ left out of this run and its report: {why}. "
            f"To show it again, run snakemake leaderboard with the config that names it"
        )
    if CHALLENGERS:
        from fedhet.leaderboard.plan import describe_plan

        logger.info(describe_plan(EXP, f"results/{SCALE}"))


announce_leaderboard()

"""The Snakemake workflow: lint, format, DAG size and build time, rerun behaviour and config
errors. Reruns are checked in a temporary copy of the workflow whose `fedhet` command is a fast
fake (tests/fake_fedhet.py) writing the same files as the real one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.workflow
COPIED = ("Snakefile", "workflow", "config", "profiles/default", "envs")


def job_counts(output: str) -> dict[str, int]:
    """Parse the 'Job stats' table of a Snakemake run or dry run."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                counts[parts[0]] = int(parts[1])
            break
    return counts


def snakemake(cwd: Path, *args: str, env=None, check: bool = True, timeout: float = 3600):
    # `python -m snakemake`, not the `snakemake` script: a pyenv shim would put its own bin
    # folder, with the real `fedhet`, ahead of the fake's on the jobs' PATH
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


# ----------------------------------------------------------------------------- static checks


def test_lint_is_clean(tmp_path):
    copy_workflow(tmp_path)  # in the repository, Snakemake would write .snakemake/ there
    proc = snakemake(tmp_path, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_snakefmt_is_clean(tmp_path):
    proc = subprocess.run(
        ["snakefmt", "--check", str(ROOT / "Snakefile"), str(ROOT / "workflow")], cwd=tmp_path,
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("scale", ["demo", "paper"])
def test_full_dag_builds(scale, tmp_path):
    """The whole DAG of each scale builds (CI lists how long this took: the slowest tests)."""
    from fedhet.experiments import load_experiment

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["scale"] = scale
    exp = load_experiment(cfg, ROOT)
    proc = dry_run_in_a_copy(tmp_path, "--quiet", "rules", "--config", f"scale={scale}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts.get("train", 0) <= len(exp.runs)


def test_slurm_resources_in_the_gpu_rules():
    """Training and calibration ask for the GPUs of one declaration (execution.smk: the scale's,
    or $FEDHET_JOB_GPUS); training asks for them as `gres` instead where it is packed for a
    cluster (job_gpu_resource, job_gres)."""
    rules = ROOT / "workflow" / "rules"
    assert re.search(r"gpu=job_gpu_resource,\s+gres=job_gres,", (rules / "train.smk").read_text())
    assert re.search(r"gpu=job_gpus,", (rules / "posthoc.smk").read_text())
    assert 'return int(RES["gpu"])' in (rules / "execution.smk").read_text()
    for scale in ("demo", "small", "paper"):
        res = yaml.safe_load((ROOT / "config" / "scales" / f"{scale}.yaml").read_text())[
            "resources"
        ]
        assert res["gpu"] == 1


def test_report_sidebar_lists_papers_and_items_in_their_order():
    """The entries' sort keys (which `python -m fedhet.report` orders the sidebar by, then takes
    off) keep the papers in order and each paper's items: its tables (Table 2 before Table 10,
    the main tables before a figure's numbers, the appendix and the extras), then its figures
    (the main ones before the appendix's)."""
    from fedhet import papers
    from fedhet.experiments import load_experiment

    categories = [papers.report_category(p) for p in papers.PAPERS]
    assert categories == sorted(categories)
    assert categories[2] == "3 · FedImpro"
    assert sorted([papers.TABLES_SUBCATEGORY, papers.FIGURES_SUBCATEGORY])[0] == \
        papers.TABLES_SUBCATEGORY
    exp = load_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), ROOT)
    vhl_tables = {i.id: papers.item_label(i.id, i.spec["title"])
                  for i in exp.items_of("vhl") if not i.is_figure}
    assert vhl_tables["t2"] == "1t02 · Table 2: FMNIST, four FL settings"
    assert papers.split_sort_key(vhl_tables["t2"]) == ("1t02", "Table 2: FMNIST, four FL settings")
    numbered = sorted((int(i[1:]), label) for i, label in vhl_tables.items())
    assert sorted(vhl_tables.values()) == [label for _, label in numbered]
    ids = ["t1", "t2", "t10", "tf1", "a1", "x1"]
    assert sorted(ids, key=papers.item_sort_key) == ids
    figures = ["fig2", "fig3a", "fig3b", "fig7", "fig18a", "figd2", "figd3", "figtin"]
    assert sorted(figures, key=papers.item_sort_key) == figures
    # Snakemake expands {wildcards} in labels: no title may contain braces
    assert not any("{" in i.spec.get("title", "") for i in exp.items.values())
    # what a reader sees names no internal key
    for item in exp.items.values():
        title = item.spec.get("title", "")
        assert not title.startswith("Item ") and "_" not in title, (item.target, title)


def test_report_job_parameters_name_the_payload_not_its_content():
    """The report prints a job's params: a payload prints as where it comes from, while its
    repr, which Snakemake's params rerun trigger compares, keeps the whole content."""
    from snakemake.logging import format_dict

    from fedhet.experiments import load_experiment

    exp = load_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), ROOT)
    payload = exp.items["vhl_t2"].payload()
    shown = format_dict({"payload": payload})
    assert shown == f"payload=config/papers/vhl.yaml: t2, {len(payload['cells'])} cells"
    assert repr(payload) == repr(dict(payload)) and "'cells': [" in repr(payload)


# ----------------------------------------------------------------------------- fake runs


def copy_workflow(tmp: Path) -> None:
    """Copy the workflow's sources into `tmp`."""
    for name in COPIED:
        src = ROOT / name
        dst = tmp / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def dry_run_in_a_copy(tmp: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    """`snakemake -n ARGS` in a copy of the workflow in `tmp`: outside the repository, so that
    what the repository has built cannot change what it plans."""
    copy_workflow(tmp)
    return snakemake(tmp, "-n", *args, env=env, check=False, timeout=300)


def fake_workflow(tmp: Path) -> dict[str, str]:
    """Copy the workflow into `tmp`; the environment whose `fedhet` is the fake."""
    copy_workflow(tmp)
    bindir = tmp / "bin"
    bindir.mkdir()
    fake = bindir / "fedhet"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "fake_fedhet.py"} "$@"\n')
    fake.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    env["FAKE_FEDHET_LOG"] = str(tmp / "calls.log")
    return env


def one_run_target() -> str:
    """The final.json of one demo training run (VHL Table 8's first), a target of one job."""
    from fedhet.experiments import load_experiment

    exp = load_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), ROOT)
    return f"results/demo/runs/{exp.items['vhl_t8'].run_ids()[0]}/final.json"


def test_local_jobs_ask_for_no_gpu_on_a_machine_without_one(tmp_path):
    """A training job run here, on a machine that shows no GPU, asks for gpu=0 (it runs on the
    CPU); a dry run and $FEDHET_JOB_GPUS show what a cluster job asks for (the scale's 1)."""
    env = fake_workflow(tmp_path)
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, whatever this machine has
    env.pop("FEDHET_JOB_GPUS", None)
    target = one_run_target()

    def asked(*args: str, **extra: str) -> list[str]:
        proc = snakemake(tmp_path, "--cores", "1", "--force", target, *args, env={**env, **extra})
        return re.findall(r"\bgpu=(\d+)", proc.stdout + proc.stderr)

    assert asked() == ["0"]
    assert asked("-n") == ["1"]
    assert asked(FEDHET_JOB_GPUS="1") == ["1"]


def test_a_run_exits_without_waiting_out_the_job_rate_window(tmp_path):
    """After each job selection Snakemake starts a timer that selects again once the job-rate
    window has passed (profiles/default); the workflow cancels those still pending when the
    process exits, so even with an hour's window the process exits once its jobs are done
    (without that it would wait out the hour, far past this test's timeout)."""
    env = fake_workflow(tmp_path)
    target = one_run_target()
    snakemake(tmp_path, "--cores", "1", "--max-jobs-per-timespan", "100000/1h", target, env=env,
              timeout=600)
    assert (tmp_path / target).is_file()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A copy of the workflow, run once end to end with the fake `fedhet`."""
    tmp = tmp_path_factory.mktemp("wf")
    env = fake_workflow(tmp)
    proc = snakemake(tmp, "--cores", "2", env=env)
    assert (tmp / "calls.log").is_file(), "the jobs ran the real fedhet, not the fake: check PATH"
    return {"dir": tmp, "env": env, "first": proc}


def calls(wd) -> list[str]:
    path = wd["dir"] / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def dry(wd, *targets: str) -> dict[str, int]:
    proc = snakemake(wd["dir"], *targets, "-n", "--quiet", "rules", env=wd["env"])
    return job_counts(proc.stdout + proc.stderr)


def test_first_run_builds_everything_once(workdir):
    from fedhet.experiments import load_experiment

    tmp = workdir["dir"]
    cfg = yaml.safe_load((tmp / "config" / "config.yaml").read_text())
    exp = load_experiment(cfg, tmp)
    trained = [c for c in calls(workdir) if c.startswith("train ")]
    # a run needed by several tables (VHL T1 and FedImpro T6) trains once
    assert len(trained) == len(set(trained)) == len(exp.runs)
    for item in exp.items.values():
        if item.is_figure:
            assert (tmp / f"results/demo/figures/{item.paper}/{item.id}.png").stat().st_size > 0
        else:
            for ext in ("csv", "md", "html"):
                assert (tmp / f"results/demo/tables/{item.paper}/{item.id}.{ext}").exists()
    html = (tmp / "reports/demo/report.html").read_text()
    assert "Scorecard" in html
    # the share of the papers' rounds, said once, from the scale's own `rounds` setting
    factor = yaml.safe_load((tmp / "config/scales/demo.yaml").read_text())["rounds"]["factor"]
    assert f"{100 * factor:g}% of the papers' rounds (at least" in html
    # and the papers whose own keys raise that minimum (FedBR's at demo scale)
    fedbr = yaml.safe_load((tmp / "config/scales/demo.yaml").read_text())["papers"]["fedbr"]
    assert f"FedBR: at least {fedbr['rounds']['min']}" in html
    assert (tmp / "results/demo/scorecard.csv").exists()
    for rid in exp.runs:
        assert (tmp / f"results/demo/logs/train/{rid}.log").exists()


def test_second_run_has_nothing_to_do(workdir):
    assert dry(workdir) == {}


def test_the_demo_budget_counts_every_job_once_the_demo_has_run(workdir):
    """The budget test's job count works on a finished demo, where Snakemake has nothing to
    do, and counts what the first run ran."""
    from test_demo_budget import demo_jobs

    assert dry(workdir) == {}  # the demo is complete: a plain dry run has no job table
    ran = job_counts(workdir["first"].stdout + workdir["first"].stderr)
    assert demo_jobs(workdir["dir"], workdir["env"]) == sum(ran.values()) > 0


def test_editing_a_figure_script_regenerates_only_figures_and_report(workdir):
    # the script of a few figures (bar charts): those figures and the report are built again
    script = workdir["dir"] / "workflow" / "scripts" / "figures" / "bars.py"
    script.write_text(script.read_text() + "\n# edited\n")
    counts = dry(workdir)
    assert "train" not in counts and "table" not in counts
    assert counts.get("figure", 0) >= 1 and counts.get("report") == 1
    snakemake(workdir["dir"], "--cores", "2", env=workdir["env"])
    assert dry(workdir) == {}


def test_editing_a_caption_regenerates_only_the_report(workdir):
    caption = workdir["dir"] / "workflow" / "report" / "figure.rst"
    original, before = caption.read_text(), caption.stat()
    caption.write_text(original + "\n")
    try:
        assert dry(workdir) == {"report": 1, "all": 1}
    finally:  # the caption as it was, its time too: the report need not be built again
        caption.write_text(original)
        os.utime(caption, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_editing_a_reference_value_retrains_nothing(workdir):
    path = workdir["dir"] / "config" / "papers" / "vhl.yaml"
    original = path.read_text()
    path.write_text(original.replace("acc: 79.98, rounds: 287", "acc: 80.0, rounds: 287", 1))
    try:
        counts = dry(workdir)
        assert "train" not in counts
        assert counts.get("table") == 1  # vhl t1 only
    finally:
        path.write_text(original)


def test_changing_one_cell_setting_retrains_only_that_run(workdir):
    path = workdir["dir"] / "config" / "papers" / "vhl.yaml"
    original = path.read_text()
    old = (
        "a01-e5-k10:\n              base: { fedavg: 0.01, fedprox: 0.01, scaffold: 0.01, "
        "fednova: 0.01 }"
    )
    assert original.count(old) == 3  # CIFAR-10 (first), FMNIST, CIFAR-100; SVHN differs
    path.write_text(original.replace(old, old.replace("scaffold: 0.01", "scaffold: 0.02"), 1))
    try:
        counts = dry(workdir)
        # one new run (CIFAR-10, α=0.1 E=5, SCAFFOLD w/o VHL), shared by VHL T1 and FedImpro T6
        assert counts.get("train") == 1
        assert "prepare_data" not in counts and "partition" not in counts
        # VHL T1, T9 (the lr table), T10 (derived from T1's runs) and FedImpro T6
        assert counts.get("table") == 4
    finally:
        path.write_text(original)


def test_runtime_settings_do_not_retrain(workdir):
    path = workdir["dir"] / "config" / "scales" / "demo.yaml"
    original = path.read_text()
    path.write_text(original.replace("checkpoint_every: 5", "checkpoint_every: 2"))
    try:
        assert "train" not in dry(workdir)
    finally:
        path.write_text(original)


def test_named_targets(workdir):
    assert dry(workdir, "vhl_t1") == {} and dry(workdir, "fedlgd") == {}
    for name in ("vhl_t99", "nonexist"):  # with or without an underscore
        proc = snakemake(workdir["dir"], "-n", name, env=workdir["env"], check=False)
        assert proc.returncode != 0
        assert f"unknown target '{name}'; valid targets:" in proc.stdout + proc.stderr
        assert "vhl_t1" in proc.stdout + proc.stderr


def test_other_scale_lives_side_by_side(workdir):
    counts = dry(workdir, "--config", "scale=small")
    assert counts.get("train", 0) > 100
    assert not (workdir["dir"] / "results" / "small").exists()


def test_ci_target_touches_every_rule_and_method(workdir):
    from fedhet.experiments import ci_selection, load_experiment

    tmp = workdir["dir"]
    cfg = yaml.safe_load((tmp / "config" / "config.yaml").read_text())
    exp = load_experiment(cfg, tmp)
    items, runs = ci_selection(exp, cfg["ci"])
    all_runs = set(runs) | {r for t in items for r in exp.items[t].run_ids()}
    algos = {exp.runs[r]["algorithm"]["name"] for r in all_runs}
    assert algos >= {"fedavg", "fedprox", "scaffold", "fednova", "feddyn"}
    assert any(exp.runs[r]["training"]["centralized"] for r in all_runs)
    kinds = {exp.items[t].kind for t in items}
    # rounds-to-target tables need every block of a main table (34 runs at demo); their maths
    # are unit-tested (tests/test_tables.py, tests/test_vhl_workflow.py)
    assert kinds >= {"accuracy", "settings", "curve", "tsne", "virtual_grid"}
    plugins = {p["name"] for r in all_runs for p in exp.runs[r]["plugins"]}
    assert plugins >= {"vhl", "feddf", "distilled", "fedlgd"}


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        (
            "config/papers/vhl.yaml",
            "kind: rounds_to_target",
            "kind: rounds_to_targets",
            r"config/papers/vhl\.yaml: invalid setting 'tables\.t1\.kind'",
        ),
        (
            "config/papers/fedimpro.yaml",
            "feddyn: { label: FedDyn, set: { algorithm: { name: feddyn",
            "feddyn: { label: FedDyn, set: { algorithm: { name: fedyn",
            r"fedimpro\.yaml.*unknown algorithm 'fedyn'; valid: .*feddyn",
        ),
        (
            "config/scales/demo.yaml",
            "threads: 1,",
            "threads: 0,",
            r"config/scales/demo\.yaml: invalid setting 'resources\.threads'",
        ),
        (
            "config/config.yaml",
            "scale: demo",
            "scale: huge",
            r"config/config\.yaml: unknown scale 'huge'; valid: demo, paper, small",
        ),
    ],
)
def test_config_errors_stop_before_any_job(workdir, file, old, new, message):
    path = workdir["dir"] / file
    original = path.read_text()
    assert old in original
    path.write_text(original.replace(old, new, 1))
    try:
        before = len(calls(workdir))
        proc = snakemake(workdir["dir"], "--cores", "1", env=workdir["env"], check=False)
        assert proc.returncode != 0
        assert re.search(message, proc.stdout + proc.stderr), proc.stdout + proc.stderr
        assert len(calls(workdir)) == before
    finally:
        path.write_text(original)


def test_seeds_from_the_command_line(workdir):
    """`--config seeds=[0,1]` (numbers arrive as strings) adds the second seed's runs only
    (items with their own seeds, FedLGD's Figs 5-6, keep theirs)."""
    from fedhet.experiments import load_experiment

    cfg = yaml.safe_load((workdir["dir"] / "config" / "config.yaml").read_text())
    from fedhet.figures.kinds import FIGURE_KINDS

    def needed(exp) -> set[str]:
        """The runs some table or figure reads (a figure may read the first seed's only)."""
        out = set()
        for item in exp.items.values():
            if not item.is_figure:
                out |= set(item.run_ids())
                continue
            for path in FIGURE_KINDS.get(item.kind).inputs(item, exp, "results/demo"):
                parts = path.split("/")
                if "runs" in parts:
                    out.add(parts[parts.index("runs") + 1])
        return out

    before = load_experiment(cfg, workdir["dir"])
    after = load_experiment({**cfg, "seeds": [0, 1]}, workdir["dir"])
    new = needed(after) - set(before.runs)
    assert new and all(rid.endswith("-s1") for rid in new)
    counts = dry(workdir, "--config", "seeds=[0,1]")
    assert counts.get("train") == len(new)


def test_a_scale_from_the_command_line_is_blamed_there(workdir):
    proc = snakemake(workdir["dir"], "-n", "--config", "scale=big", env=workdir["env"],
                     check=False)
    assert proc.returncode != 0
    assert "--config scale=big: unknown scale 'big'" in proc.stdout + proc.stderr


def demo_timing(cwd: Path, *args: str, env: dict[str, str], timeout: float = 600):
    return subprocess.run(["bash", str(ROOT / "ci" / "demo-timing.sh"), *args], cwd=cwd,
                          env={**env, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=timeout)


def test_demo_timing_reports_the_run_from_its_log(tmp_path):
    """ci/demo-timing.sh runs the targets, then prints the machine, Snakemake's exit status and
    `fedhet timing` of the run's own log."""
    env = fake_workflow(tmp_path)
    target = one_run_target()
    proc = demo_timing(tmp_path, "--cores", "1", "--out", "timing", "--", target, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (tmp_path / "timing" / "summary.txt").read_text()
    assert "run on 1 cores" in summary and "exit status 0 after" in summary
    assert re.search(r"^  train\s+1\s", summary, re.M), summary
    assert (tmp_path / "timing" / "snakemake.log").is_file()
    assert (tmp_path / target).is_file()


def test_demo_timing_cut_short_stops_snakemake_and_reports_the_jobs_left(tmp_path):
    """--seconds stops Snakemake itself (SIGINT reaches it: it runs in the script's foreground),
    not only after its jobs end (the fake training job would take two minutes), and the
    interrupted process exits without waiting out the job-rate window's pending re-selections
    (an hour here; Ctrl-C runs neither onsuccess nor onerror)."""
    env = {**fake_workflow(tmp_path), "FAKE_FEDHET_SECONDS": "120"}
    target = one_run_target()
    proc = demo_timing(tmp_path, "--cores", "1", "--seconds", "12", "--out", "timing", "--",
                       "--max-jobs-per-timespan", "100000/1h", target, env=env, timeout=110)
    summary = (tmp_path / "timing" / "summary.txt").read_text()
    assert proc.returncode == 124, summary
    assert "did not finish" in summary, summary
    assert not (tmp_path / target).exists()
    assert demo_timing(tmp_path, "--cores", "two", env=env).returncode == 2

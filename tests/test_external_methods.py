"""Methods of other installed packages: a toy method package (tests/data/toy_methods), installed
here as a distribution with an entry point in group `fedhet.methods` (a `*.dist-info` folder on
the path, which importlib.metadata finds as it finds any installed package), is listed by
`fedhet methods`, trains through `fedhet train`, and carries its version and source in its run
ids; broken or clashing packages are refused with their distribution named, and fedhet's own
methods keep working."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fedhet
from fedhet import catalog, external
from fedhet.cli import main
from fedhet.config import ConfigError, resolve_run, run_id
from fedhet.registry import UnknownNameError

TOY = Path(__file__).parent / "data" / "toy_methods" / "fedhet_toy"
SRC = Path(__file__).parents[1] / "src"
RUN = {"dataset": {"name": "digits10", "options": {"train_per_class": 10, "test_per_class": 2}},
       "model": {"name": "cnn4", "width": 0.25}, "partition": {"num_clients": 2, "min_size": 2},
       "training": {"rounds": 1, "clients_per_round": 2, "batch_size": 8, "local_steps": 2}}
TOY_RUN = {**RUN, "plugins": [{"name": "logitpen", "params": {"weight": 0.1}}]}


def _forget() -> None:
    """Read the installed packages afresh (the catalog reads them once per process)."""
    catalog._external.cache_clear()
    catalog._declarations.cache_clear()
    cached = getattr(external, "source_hash", None)  # an older fedhet's per-process hash cache
    if cached is not None:
        cached.cache_clear()


def registered() -> dict:
    """The registries' names now; `unregister(before)` drops those a test's packages added
    since (re-imported by a later test, a package registers its methods again)."""
    from fedhet.algorithms.base import ALGORITHMS
    from fedhet.plugins import PLUGINS

    return {registry: set(registry._items) for registry in (ALGORITHMS, PLUGINS)}


def unregister(before: dict) -> None:
    builtin = set(catalog._builtin())  # fedhet's own stay registered
    for registry, names in before.items():
        for name in set(registry._items) - names - builtin:
            del registry._items[name]


class Site:
    """A folder on sys.path holding installed distributions, as site-packages does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)

    def install(self, dist: str, version: str, entry_points: dict[str, str],
                modules: dict[str, str | Path], *, files: dict[str, str] | None = None,
                record: bool = True) -> Path:
        """Install `dist` with `entry_points` (name → module) in group fedhet.methods, as pip
        does: each module is a folder to copy or the text of its `__init__.py`; `files` are
        more files (path in the site folder → text, e.g. a top-level module `helper.py`); the
        metadata folder's RECORD lists them all (unless not `record`). Returns that folder."""
        written: list[Path] = []
        for name, source in modules.items():
            if isinstance(source, Path):
                shutil.copytree(source, self.root / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (self.root / name).mkdir()
                (self.root / name / "__init__.py").write_text(source)
            written += [p for p in (self.root / name).rglob("*") if p.is_file()]
        for rel, text in (files or {}).items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
            written.append(self.root / rel)
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n"
                                       f"Version: {version}\n")
        lines = [f"{name} = {module}" for name, module in entry_points.items()]
        (info / "entry_points.txt").write_text("[fedhet.methods]\n" + "\n".join(lines) + "\n")
        (info / "INSTALLER").write_text("pip\n")
        if record:
            listed = [*written, info / "METADATA", info / "entry_points.txt",
                      info / "INSTALLER", info / "RECORD"]
            (info / "RECORD").write_text("".join(
                f"{p.relative_to(self.root).as_posix()},,\n" for p in listed))
        _forget()
        return info


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty site folder on sys.path; afterwards the catalog forgets what it held."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    made = Site(tmp_path / "site")
    before, names = set(sys.modules), registered()
    yield made
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {p.name.removesuffix(".py") for p in made.root.iterdir()} | {
                "fedhet_toy", "lpmath"}:  # also those of an editable install's folder
            del sys.modules[name]
    unregister(names)
    monkeypatch.undo()
    _forget()


def _toy(site: Site) -> None:
    site.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"}, {"fedhet_toy": TOY})


def _listing(capsys) -> str:
    assert main(["methods"]) == 0
    return capsys.readouterr().out


def test_listed_with_its_package_beside_the_builtin_methods(site, capsys):
    _toy(site)
    out = _listing(capsys)
    assert "logitpen (plugin, toy-methods 0.1): logit penalty" in out
    assert "    weight = 0.01: weight of the mean squared logit [a number >= 0]" in out
    assert "fedavg (algorithm, fedhet)" in out and "vhl (plugin, fedhet)" in out
    assert "refused" not in out
    assert main(["methods", "--kind", "algorithm"]) == 0
    assert "logitpen" not in capsys.readouterr().out


def test_trains_one_round_through_fedhet_train(site, tmp_path):
    _toy(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(SRC)])}
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "fedhet.cli", "train", "--config-json", json.dumps(TOY_RUN),
         "--out", str(out), "--device", "cpu"],
        env={**env, "OMP_NUM_THREADS": "1"}, cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["status"] == "completed"
    assert final["run_id"].startswith("digits10-fedavg+logitpen-")
    assert final["run_id"] == run_id(resolve_run(TOY_RUN))  # this process sees the same package
    resolved = yaml.safe_load((out / "resolved.yaml").read_text())
    assert resolved["plugins"] == [{"name": "logitpen", "params": {"weight": 0.1}}]
    # the provenance says where each method's code came from: the package, its version and,
    # for another package's method, the hash of its code (the one in the run id)
    methods = resolved["provenance"]["methods"]
    source = catalog.package("logitpen").source
    assert methods["logitpen"] == {
        "kind": "plugin", "package": "toy-methods", "version": "0.1", "source": source.digest,
        "source_covers": source.describe()}
    assert methods["fedavg"] == {"kind": "algorithm", "package": "fedhet",
                                 "version": fedhet.__version__}
    assert source.describe().startswith(f"sha256 {source.digest} of 2 files: the files its "
                                         "RECORD lists")


def test_run_ids_follow_the_package_version_and_source(site, tmp_path):
    builtin = run_id(resolve_run(RUN))
    _toy(site)
    first = run_id(resolve_run(TOY_RUN))
    assert run_id(resolve_run(RUN)) == builtin  # an installed package changes no built-in id
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text().replace("pow(2)", "abs()"))
    _forget()
    edited = run_id(resolve_run(TOY_RUN))
    assert edited != first
    assert run_id(resolve_run(RUN)) == builtin
    # unchanged source gives the same id again, in any process: no timestamps or paths in it
    _forget()
    assert run_id(resolve_run(TOY_RUN)) == edited
    (site.root / "toy_methods-0.1.dist-info").rename(site.root / "toy_methods-0.2.dist-info")
    meta = site.root / "toy_methods-0.2.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.1", "Version: 0.2"))
    _forget()
    assert catalog.package("logitpen").version == "0.2"
    assert run_id(resolve_run(TOY_RUN)) not in (first, edited)


# the toy plug-in with its maths in a helper module of the same distribution (`lpmath`, a
# top-level module beside the package, as the fl-logitpen laid it out)
HELPED = {"fedhet_toy/plugin.py": (TOY / "plugin.py").read_text().replace(
    "return float(self.hp[\"weight\"]) * out.logits.pow(2).mean()",
    "from lpmath import penalty\n\n        return penalty(out.logits, float(self.hp[\"weight\"]))"),
    "lpmath.py": "def penalty(logits, weight):\n    return weight * logits.pow(2).mean()\n"}


def test_an_edit_to_a_helper_module_of_the_distribution_changes_the_run_ids(site):
    """Every file the distribution installs is hashed (its RECORD), not only the package its
    entry point names: an edit to a helper module gives new run ids."""
    site.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"},
                 {"fedhet_toy": TOY}, files=HELPED)
    assert "penalty(out.logits" in (site.root / "fedhet_toy" / "plugin.py").read_text()
    first = run_id(resolve_run(TOY_RUN))
    helper = site.root / "lpmath.py"
    helper.write_text(helper.read_text().replace("weight *", "10 * weight *"))
    _forget()
    assert run_id(resolve_run(TOY_RUN)) != first
    # a file added to the installed package (not in its RECORD) counts too
    again = run_id(resolve_run(TOY_RUN))
    (site.root / "fedhet_toy" / "more.py").write_text("X = 1\n")
    _forget()
    assert run_id(resolve_run(TOY_RUN)) not in (first, again)
    # what it hashes: its package's files, the helper, never the metadata folder or caches
    files = [name for name, _ in external.code_files(
        importlib.metadata.distribution("toy-methods"))[0]]
    assert files == ["fedhet_toy/__init__.py", "fedhet_toy/more.py", "fedhet_toy/plugin.py",
                     "lpmath.py"]


def test_the_helper_module_trains_with_its_package(site, tmp_path):
    site.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"},
                 {"fedhet_toy": TOY}, files=HELPED)
    plugin = catalog.plugins_of(resolve_run(TOY_RUN))[0]
    import torch

    assert float(plugin.extra_loss(None, type("Out", (), {"logits": torch.ones(2, 3)})())) == \
        pytest.approx(0.1)


def _editable(site: Site, tmp_path: Path, monkeypatch, finder: bool) -> Path:
    """The toy package with a helper, installed editable from a project's src folder: a .pth
    naming the folder (hatchling, setuptools' lax mode) or setuptools' import finder. Returns
    the project's src folder (on sys.path, as the .pth would put it)."""
    src = tmp_path / "project" / "src"
    shutil.copytree(TOY, src / "fedhet_toy", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in HELPED.items():
        (src / rel).write_text(text)
    (src / "notes.txt").write_text("not a module\n")
    monkeypatch.syspath_prepend(str(src))
    for name in [m for m in sys.modules if m.split(".")[0] in ("fedhet_toy", "lpmath")]:
        del sys.modules[name]  # imported from another test's folder
    if finder:
        mapping = {"fedhet_toy": str(src / "fedhet_toy"), "lpmath": str(src / "lpmath.py")}
        files = {"__editable___toy_methods_0_1_finder.py": f"MAPPING = {mapping!r}\n",
                 "__editable__.toy_methods-0.1.pth": "import __editable___toy_methods_0_1_finder"}
    else:
        files = {"_toy_methods.pth": f"{src}\n"}
    info = site.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"}, {}, files=files)
    (info / "direct_url.json").write_text(json.dumps(
        {"url": (tmp_path / "project").as_uri(), "dir_info": {"editable": True}}))
    _forget()
    return src


@pytest.mark.parametrize("finder", [False, True], ids=["pth-folder", "setuptools-finder"])
def test_an_editable_install_hashes_the_modules_of_its_source_folder(site, tmp_path,
                                                                    monkeypatch, finder):
    src = _editable(site, tmp_path, monkeypatch, finder)
    assert catalog.package("logitpen").source.how == "editable"
    names = [n for n, _ in external.code_files(importlib.metadata.distribution("toy-methods"))[0]]
    assert names == ["fedhet_toy/__init__.py", "fedhet_toy/plugin.py", "lpmath.py"]
    first = run_id(resolve_run(TOY_RUN))
    helper = src / "lpmath.py"
    helper.write_text(helper.read_text().replace("weight *", "2 * weight *"))
    _forget()
    assert run_id(resolve_run(TOY_RUN)) != first


def test_code_the_run_ids_cannot_cover_is_refused(site, tmp_path, monkeypatch, capsys):
    # no RECORD: nothing says which files are its code
    site.install("toy-norecord", "0.1", {"logitpen": "fedhet_toy"}, {"fedhet_toy": TOY},
                 record=False)
    out = _listing(capsys)
    assert ("toy-norecord 0.1 (entry point logitpen = fedhet_toy): its metadata lists no "
            "installed files (no RECORD)") in out
    assert "logitpen" not in catalog.names()
    shutil.rmtree(site.root / "toy_norecord-0.1.dist-info")
    # an entry point module that the distribution does not install (lying loose on the path)
    (site.root / "toy_loose").mkdir()
    (site.root / "toy_loose" / "__init__.py").write_text(
        CLASH.format(name="loose", module="toy_loose"))
    site.install("toy-elsewhere", "0.1", {"loose": "toy_loose"}, {}, files={"other.py": ""})
    out = _listing(capsys)
    assert "toy-elsewhere 0.1 (entry point loose = toy_loose): module toy_loose (" in out
    assert "is not among the files of the distribution that its run ids hash" in out
    # an editable install whose .pth holds only import lines the hash cannot follow
    site.install("toy-opaque", "0.1", {"opaque": "toy_loose"}, {},
                 files={"_opaque.pth": "import sys; sys.path.append('/elsewhere')\n"})
    (site.root / "toy_opaque-0.1.dist-info" / "direct_url.json").write_text(
        '{"url": "file:///elsewhere", "dir_info": {"editable": true}}')
    _forget()
    assert "toy-opaque 0.1 (entry point opaque = toy_loose): is an editable install whose " \
           "source folders" in _listing(capsys)


BROKEN = {
    "toy_import": 'raise ImportError("needs the package mine_dependency")\n',
    "toy_empty": '"""no declarations"""\n',
    "toy_wrong": 'DECLARATIONS = [{"name": "wrong", "kind": "plugin"}]\n',
    "toy_posthoc": ('from fedhet.declare import Method\n'
                    'DECLARATIONS = [Method(name="calib", kind="posthoc", summary="x", '
                    'module="toy_posthoc")]\n'),
}
CLASH = ('from fedhet.declare import Method\n'
         'DECLARATIONS = [Method(name="{name}", kind="plugin", summary="x", module="{module}")]\n')


@pytest.mark.parametrize("module, reason", [
    ("toy_import", "cannot import toy_import: ImportError: needs the package mine_dependency"),
    ("toy_empty", "module toy_empty has no DECLARATIONS list"),
    ("toy_wrong", "DECLARATIONS of toy_wrong holds {'name': 'wrong', 'kind': 'plugin'}, not a "
                  "fedhet.declare.Method"),
    ("toy_posthoc", "declares post-hoc step 'calib'; other packages may declare algorithms and "
                    "plug-ins only"),
])
def test_a_broken_package_is_refused_and_named(site, capsys, module, reason):
    _toy(site)
    site.install("toy-broken", "1.2", {"broken": module}, {module: BROKEN[module]})
    out = _listing(capsys)
    assert f"toy-broken 1.2 (entry point broken = {module}): {reason}" in out
    assert "logitpen (plugin, toy-methods 0.1)" in out  # the other package still joins
    assert run_id(resolve_run(RUN))  # fedhet's own methods still resolve
    # a run naming a method it does not get says which package was refused and why
    with pytest.raises(ConfigError, match=f"unknown plugin 'broken'.*toy-broken 1.2.*{module}"):
        resolve_run({**RUN, "plugins": [{"name": "broken"}]})
    with pytest.raises(UnknownNameError, match="toy-broken 1.2"):
        catalog.method("broken")


def test_a_name_fedhet_declares_is_refused_and_the_builtin_kept(site, capsys):
    site.install("toy-clash", "0.3", {"clash": "toy_clash"},
                 {"toy_clash": CLASH.format(name="fedntd", module="toy_clash")})
    out = _listing(capsys)
    assert ("toy-clash 0.3 (entry point clash = toy_clash): declares 'fedntd', which fedhet "
            "already declares; rename it") in out
    assert "fedntd (plugin, fedhet)" in out
    assert catalog.package("fedntd") is None
    assert catalog.method("fedntd").module == "fedhet.methods.fedntd.plugin"


def test_two_packages_declaring_one_name_are_both_refused(site, capsys):
    _toy(site)
    site.install("toy-twin", "0.1", {"twin": "toy_twin"},
                 {"toy_twin": CLASH.format(name="logitpen", module="toy_twin")})
    out = _listing(capsys)
    assert "toy-methods 0.1 (entry point logitpen = fedhet_toy): declares 'logitpen', as does " \
           "toy-twin 0.1" in out
    assert "toy-twin 0.1 (entry point twin = toy_twin): declares 'logitpen', as does " \
           "toy-methods 0.1" in out
    assert "logitpen" not in catalog.names()


def test_an_implementation_that_fails_to_import_is_named_and_stops_no_fork_server(site):
    site.install("toy-badimpl", "0.4", {"bad": "toy_bad"},
                 {"toy_bad": CLASH.format(name="badimpl", module="toy_bad.plugin")})
    (site.root / "toy_bad" / "plugin.py").write_text("raise RuntimeError('half-written')\n")
    assert catalog.package("badimpl").label == "toy-badimpl 0.4"
    with pytest.raises(ImportError, match="plugin 'badimpl' of toy-badimpl 0.4: cannot import "
                       "its module toy_bad.plugin: RuntimeError: half-written"):
        catalog.implementation("badimpl")
    from fedhet.local.server import _preload

    _preload()  # fedhet's own methods only: the server starts whatever other packages hold


def test_the_installed_packages_fingerprint_follows_install_edit_and_removal(site):
    none = external.installed()
    _toy(site)
    first = external.installed()
    assert first != none
    assert external.installed() == first  # read afresh, the same while nothing changes
    assert "fedhet_toy" not in sys.modules  # nothing of the package is imported for it
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text().replace("pow(2)", "abs()"))  # no cache to clear
    edited = external.installed()
    assert edited not in (none, first)
    site.install("toy-other", "1.0", {"other": "toy_other"},
                 {"toy_other": CLASH.format(name="other", module="toy_other")})
    both = external.installed()
    assert both not in (none, first, edited)
    shutil.rmtree(site.root / "toy_other-1.0.dist-info")
    assert external.installed() == edited  # removed again


def test_a_fork_server_serves_no_edited_external_method(site, tmp_path, monkeypatch):
    """A server started with the toy package serves its commands until the package's source
    changes; then each command runs in its own process and says why."""
    from fedhet.local import launcher, protocol

    _toy(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), str(SRC)]),
           "OMP_NUM_THREADS": "1"}
    env.pop(protocol.ENV, None)
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # the server finds the package too
    server = launcher.start_server(tmp_path / "server.log", max_jobs=2)
    try:
        def methods() -> subprocess.CompletedProcess:
            done = subprocess.run([sys.executable, "-m", "fedhet.cli", "methods"],
                                  env={**env, protocol.ENV: server.address}, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            return done

        served = methods()
        assert "in its own process" not in served.stderr
        assert "logitpen (plugin, toy-methods 0.1): logit penalty" in served.stdout
        declarations = site.root / "fedhet_toy" / "__init__.py"
        declarations.write_text(declarations.read_text().replace(
            'summary="logit penalty', 'summary="edited penalty'))
        alone = methods()  # the server holds the old declaration: it must not answer
        assert "logitpen (plugin, toy-methods 0.1): edited penalty" in alone.stdout
        assert "the fork server declined it: an external method package changed after the " \
               "server started" in alone.stderr
        assert "running this command in its own process" in alone.stderr
    finally:
        launcher.stop_server(server.process)

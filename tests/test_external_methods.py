"""Methods of other installed packages: a toy method package (tests/data/toy_methods), installed
here as a distribution with an entry point in group `fedhet.methods` (a `*.dist-info` folder on
the path, which importlib.metadata finds as it finds any installed package), is listed by
`fedhet methods`, trains through `fedhet train`, and carries its version and source in its run
ids; broken or clashing packages are refused with their distribution named, and fedhet's own
methods keep working."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    external.source_hash.cache_clear()


class Site:
    """A folder on sys.path holding installed distributions, as site-packages does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)

    def install(self, dist: str, version: str, entry_points: dict[str, str],
                modules: dict[str, str | Path]) -> None:
        """Install `dist` with `entry_points` (name → module) in group fedhet.methods; each
        module is a folder to copy or the text of its `__init__.py`."""
        for name, source in modules.items():
            if isinstance(source, Path):
                shutil.copytree(source, self.root / name, dirs_exist_ok=True)
            else:
                (self.root / name).mkdir()
                (self.root / name / "__init__.py").write_text(source)
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n"
                                       f"Version: {version}\n")
        lines = [f"{name} = {module}" for name, module in entry_points.items()]
        (info / "entry_points.txt").write_text("[fedhet.methods]\n" + "\n".join(lines) + "\n")
        _forget()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty site folder on sys.path; afterwards the catalog forgets what it held."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    made = Site(tmp_path / "site")
    before = set(sys.modules)
    yield made
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {p.name for p in made.root.iterdir()}:
            del sys.modules[name]
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
    assert "logitpen" in (out / "resolved.yaml").read_text()


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

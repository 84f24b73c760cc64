"""Builders the leaderboard tests share: the toy method package of tests/data/toy_methods
installed in a site folder, the demo experiment with challengers, and an entry of the toy
plug-in."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_external_methods import TOY, Site, _forget, registered, unregister

from fedhet import experiments as X

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ["vhl", "ccvr", "fedimpro"]  # the papers tests/data/run_ids.json records
TOY_PLUGIN = {"name": "logitpen", "label": "Toy", "set": {"plugins": [
    {"name": "logitpen", "params": {"weight": 0.05}}]}}


def toy_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The body of a `site` fixture: the toy method package installed in a site folder on
    sys.path, and forgotten again afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    made = Site(tmp_path / "site")
    made.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"}, {"fedhet_toy": TOY})
    names = registered()
    yield made
    for name in [m for m in sys.modules if m.split(".")[0] in {
            p.name.removesuffix(".py") for p in made.root.iterdir()}]:
        del sys.modules[name]
    unregister(names)
    monkeypatch.undo()
    _forget()


def experiment(challengers=(), papers=RECORDED, scale="demo", *, origins=None, results=None,
               **over) -> X.Experiment:
    """The demo experiment of `papers` with `challengers`, as the workflow loads it."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg.update(scale=scale, papers=list(papers), challengers=list(challengers), **over)
    given = {k: v for k, v in (("origins", origins), ("results", results)) if v is not None}
    return X.load_experiment(cfg, ROOT, **given)


def weight(w: float, name: str | None = None, label: str | None = None) -> dict:
    """An entry running the toy plug-in with weight `w`."""
    return {"name": name or f"lp-{w:g}", "method": "logitpen", "label": label or f"LP {w:g}",
            "set": {"plugins": [{"name": "logitpen", "params": {"weight": w}}]}}

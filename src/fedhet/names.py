"""One list of valid names per kind of thing a config names (torch-free), read from the registries
and declarations: the vocabulary `fedhet.config` validates against, so it imports nothing above
it (table and figure kinds and table metrics are listed where they are defined:
`experiments.kinds.TABLE_KINDS`, `figures.kinds.FIGURE_KINDS`, `tables.METRICS`).

The workflow's schemas list some of these names too (for editors and early errors);
`tests/test_names.py` checks that they agree with the package.
"""

from __future__ import annotations

from pathlib import Path

from fedhet.papers import PAPERS, paper_name  # noqa: F401  (re-exported)


def datasets() -> list[str]:
    from fedhet.data import DATASETS

    return DATASETS.names()


def standin_datasets() -> list[str]:
    """Datasets built offline (nothing to download)."""
    from fedhet.data import DATASETS

    return [name for name in DATASETS.names() if DATASETS.get(name).source == "stand-in"]


def models() -> list[str]:
    from fedhet.models import MODELS

    return MODELS.names()


def schemes() -> list[str]:
    from fedhet.partition import SCHEMES

    return SCHEMES.names()


def methods(kind: str, implemented: bool | None = None) -> list[str]:
    from fedhet import catalog

    return catalog.names(kind, implemented)


def scales(root: str | Path = ".") -> list[str]:
    return sorted(p.stem for p in (Path(root) / "config" / "scales").glob("*.yaml"))

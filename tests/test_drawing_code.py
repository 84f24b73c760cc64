"""The fingerprint of the code that draws results (fedhet.report.drawing): it changes with an
edit to a table's, figure's or leaderboard's code and with nothing else, so that the workflow
redraws exactly when that code changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import fedhet
from fedhet.report.drawing import DRAWING_CODE, drawing_files, drawing_fingerprint

PACKAGE = Path(fedhet.__file__).parent


def copy_of_package(tmp_path: Path) -> Path:
    root = tmp_path / "fedhet"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_every_named_drawing_place_exists():
    for name in DRAWING_CODE:
        assert (PACKAGE / name).exists(), name
    files = {p.relative_to(PACKAGE).as_posix() for p in drawing_files()}
    assert {"tables/render.py", "figures/save.py", "leaderboard/ranking.py", "printed.py"} <= files
    assert not any(f.startswith(("engine/", "methods/")) for f in files)


def test_an_edit_to_drawing_code_changes_the_fingerprint_and_only_such_an_edit(tmp_path):
    root = copy_of_package(tmp_path)
    before = drawing_fingerprint(root)
    assert before == drawing_fingerprint(root) == drawing_fingerprint(PACKAGE)
    with open(root / "engine" / "federation.py", "a", encoding="utf-8") as fh:
        fh.write("\n# training code\n")
    assert drawing_fingerprint(root) == before
    for edited in ("tables/render.py", "figures/legends.py", "printed.py"):
        with open(root / edited, "a", encoding="utf-8") as fh:
            fh.write("\n# drawn otherwise\n")
        after = drawing_fingerprint(root)
        assert after != before, edited
        before = after
    (root / "figures" / "new_kind.py").write_text("KIND = 1\n", encoding="utf-8")
    assert drawing_fingerprint(root) != before

"""Classifier weight norms per class per client (CCVR Fig. 3) and label distributions.

The engine logs, at every evaluated round, the L2 norm of every class's classifier weight
vector (row of ``head.weight``) of the global model and of every client model of that round
to ``classifier_norms.jsonl``: rows ``{round, global: [C], clients: {k: [C]}}``.
Torch-free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NORMS_FILE = "classifier_norms.jsonl"


def read_classifier_norms(source: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a run's classifier_norms.jsonl (`source`: the file or the run directory)."""
    path = Path(source)
    if path.is_dir():
        path = path / NORMS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; train the run first")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def classifier_norms_frame(source: str | os.PathLike | Sequence[dict[str, Any]],
                           rounds: Sequence[int] | None = None):
    """Tidy DataFrame with columns round, model (``global`` | ``client``), client (Int64,
    <NA> for the global model), class, norm — one row per class per model per round."""
    import pandas as pd

    rows_in = read_classifier_norms(source) if isinstance(source, (str, os.PathLike)) else source
    keep = None if rounds is None else {int(r) for r in rounds}
    rows = []
    for row in rows_in:
        r = int(row["round"])
        if keep is not None and r not in keep:
            continue
        for c, v in enumerate(row.get("global") or []):
            rows.append({"round": r, "model": "global", "client": None, "class": c, "norm": v})
        for k, norms in sorted((row.get("clients") or {}).items(), key=lambda kv: int(kv[0])):
            for c, v in enumerate(norms):
                rows.append({"round": r, "model": "client", "client": int(k), "class": c,
                             "norm": v})
    frame = pd.DataFrame(rows, columns=["round", "model", "client", "class", "norm"])
    frame["client"] = frame["client"].astype("Int64")
    return frame


def norm_matrix(frame, round: int):
    """Clients × classes table of the norms at one round (a Fig. 3 heatmap)."""
    part = frame[(frame["model"] == "client") & (frame["round"] == round)]
    return part.pivot(index="client", columns="class", values="norm")


def label_distribution_frame(run_dir: str | os.PathLike):
    """Tidy DataFrame (client, class, count) of a run's partition (Fig. 3, first panel)."""
    import numpy as np
    import pandas as pd

    from fedhet.saved import read_settings

    saved = read_settings(run_dir)
    data = saved.data
    indices, _ = saved.partition()
    labels = np.asarray(data.y_train)
    rows = []
    for k, ix in enumerate(indices):
        counts = np.bincount(labels[np.asarray(ix)], minlength=data.num_classes)
        rows += [{"client": k, "class": c, "count": int(n)} for c, n in enumerate(counts)]
    return pd.DataFrame(rows)

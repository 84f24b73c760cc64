"""The GPU check's results file: one JSON record per measurement, and its summary table.

`gpu-check.json` is a JSON list of records with the fields of `FIELDS`. Each record is added by
rewriting the whole file atomically (`fedhet.atomic`), so a check cut short by its time limit
still leaves a complete file holding every measurement finished before the cut.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedhet import atomic

# `model`: the registered model (`fedhet.models`) whose training by the engine the figures
# measure, as `fedhet cost --throughput` reads it; null where the record measured no model of
# the engine (the CUDA tests, the reference loop, a part that did not finish). `shape`: the
# model's shape as a run trains it (`fedhet.cost.estimate.ModelShape.key`), which `fedhet
# cost` matches runs to; null where the figures stand for any shape of `model`.
FIELDS = ("device", "torch", "mode", "model", "shape", "what", "s_per_round", "img_per_s",
          "tflops", "peak_mem_gib", "ok", "note")
NUMBERS = ("s_per_round", "img_per_s", "tflops", "peak_mem_gib")


def device_name(device: Any) -> str:
    """The accelerator's name for a CUDA device, else `cpu (N threads)`."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads, {platform.machine()})"


def make_record(what: str, mode: str, device: str, torch_version: str, *,
                model: str | None = None, shape: str | None = None,
                seconds: float | None = None, images: int | None = None,
                flops_per_image: float | None = None, peak_mem_bytes: int | None = None,
                ok: bool = True, note: str = "") -> dict[str, Any]:
    """One measurement of `model` (None: no model of the engine): `seconds` per round over
    `images` training images per round gives images/s, and with `flops_per_image` TFLOP/s;
    absent figures are None."""
    rate = images / seconds if seconds and images else None
    tflops = rate * flops_per_image / 1e12 if rate and flops_per_image else None
    gib = peak_mem_bytes / 2**30 if peak_mem_bytes is not None else None
    return {"device": device, "torch": torch_version, "mode": mode, "model": model,
            "shape": shape, "what": what,
            "s_per_round": seconds, "img_per_s": rate, "tflops": tflops, "peak_mem_gib": gib,
            "ok": bool(ok), "note": note}


def check_record(record: Mapping[str, Any]) -> None:
    """Raise ValueError naming what is wrong with a record: missing or unknown fields, a
    non-finite or non-numeric figure, `ok` not a boolean."""
    missing = [f for f in FIELDS if f not in record]
    unknown = [f for f in record if f not in FIELDS]
    if missing or unknown:
        raise ValueError(f"GPU-check record {dict(record)!r}: missing fields {missing}, "
                         f"unknown fields {unknown}; a record has exactly {', '.join(FIELDS)}")
    for field in NUMBERS:
        value = record[field]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise ValueError(f"GPU-check record '{record['what']}': {field} must be a finite "
                             f"number or null, got {value!r}")
    if record["model"] is not None and not isinstance(record["model"], str):
        raise ValueError(f"GPU-check record '{record['what']}': model must be a model's name or "
                         f"null, got {record['model']!r}")
    if record["shape"] is not None and not isinstance(record["shape"], str):
        raise ValueError(f"GPU-check record '{record['what']}': shape must be a model shape's "
                         f"key or null, got {record['shape']!r}")
    if not isinstance(record["ok"], bool):
        raise ValueError(f"GPU-check record '{record['what']}': ok must be true or false, "
                         f"got {record['ok']!r}")


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records in `path`; [] when the file does not exist yet. A record written before
    records had a `shape` reads as one of no shape."""
    path = Path(path)
    if not path.exists():
        return []
    records = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(records, list):
        raise ValueError(f"{path} is not a GPU-check results file (a JSON list of records); "
                         "delete it or pass another --out")
    records = [{**r, "shape": r.get("shape")} if isinstance(r, dict) else r for r in records]
    for record in records:
        check_record(record)
    return records


def append_record(path: str | os.PathLike, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Add `record` to the results file, rewriting it atomically; returns all records."""
    check_record(record)
    records = [*read_records(path), {f: record[f] for f in FIELDS}]
    atomic.write_text(path, json.dumps(records, indent=2) + "\n")
    return records


def _figure(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def summary(records: Sequence[Mapping[str, Any]], note_width: int = 60) -> str:
    """A plain-text table of the records: what, mode, model, figures, ok, the start of the
    note; the device and torch version of each group of records above them."""
    header = ("what", "mode", "model", "s/round", "img/s", "TFLOP/s", "peak GiB", "ok", "note")
    rows, where = [], None
    lines = []
    for r in records:
        rows.append(((r["device"], r["torch"]), (
            r["what"], r["mode"], r["model"] or "-", _figure(r["s_per_round"], 3),
            _figure(r["img_per_s"], 0), _figure(r["tflops"], 1), _figure(r["peak_mem_gib"], 2),
            "yes" if r["ok"] else "NO",
            " ".join(str(r["note"]).split())[:note_width])))
    widths = [max([len(h), *(len(cells[i]) for _, cells in rows)]) for i, h in enumerate(header)]
    right = {3, 4, 5, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    for place, cells in rows:
        if place != where:
            where = place
            lines += [f"device {place[0]} | torch {place[1]}", line(header)]
        lines.append(line(cells))
    failed = sum(not r["ok"] for r in records)
    lines.append(f"{len(records)} measurements, {failed} failed")
    return "\n".join(lines)


def print_summary(path: str | os.PathLike) -> int:
    """Print the summary table of the results file at `path`; the check's exit status: 0 when
    it holds measurements and every one is ok, else 1."""
    records = read_records(path)
    print(summary(records), flush=True)
    return 0 if records and all(r["ok"] for r in records) else 1

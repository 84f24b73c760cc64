"""How fast a model trains, for `fedhet cost`'s GPU-hours: the assumed default, or the fastest
measured record per model or model shape in a throughput file (the `gpu-check.json` that
`ci/gpu-check.sh` writes, or `fedhet bench --models`' records)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedhet.engine.modes import Mode


@dataclass(frozen=True)
class Throughput:
    """Sustained TFLOP/s of one model's training and evaluation, and where the figure is from."""

    tflops: float
    source: str


DEFAULT_THROUGHPUT = Throughput(
    30.0,
    "assumed default: 30 TFLOP/s sustained on one H100 in fp32/tf32 without tuning, for every "
    "model (a speed-tuned ResNet-18 CIFAR-10 loop reaches ~80 TFLOP/s on an A100 in fp16; "
    "small CNNs at batch <= 64 are launch-bound and likely slower)",
)


class ThroughputFileError(ValueError):
    """A throughput file that cannot be read as records of measured TFLOP/s."""


def _model_of(record: Mapping[str, Any], models: Iterable[str]) -> str | None:
    """The model a record measured: its `model`, else a registered model named in `what`
    (case and hyphens ignored: "ResNet-18" names resnet18)."""
    if record.get("model"):
        return str(record["model"])
    what = str(record.get("what", "")).lower()
    words = {w.replace("-", "") for w in re.split(r"[^a-z0-9-]+", what)}
    named = [m for m in models if m in words]
    return named[0] if len(named) == 1 else None


def mode_filter(wanted: str) -> Callable[[Any], bool]:
    """Which record modes `--mode wanted` selects: a precision alone (`bf16`) selects every
    mode in it, whatever its speed flags (`bf16+channels_last+cudnn_benchmark`); a mode with
    flags selects that mode, in any order of its flags. ValueError naming the valid forms."""
    mode = Mode.parse(wanted)
    precision_only = "+" not in wanted

    def selects(given: Any) -> bool:
        try:
            other = Mode.parse(str(given))
        except ValueError:  # "-" or absent: a record of no mode
            return False
        return other.precision == mode.precision if precision_only else other == mode

    return selects


def _tflops(record: Mapping[str, Any], path: Path, i: int, model: str) -> float | None:
    """The record's TFLOP/s: None where it measured none (`tflops` null or absent, e.g. a run
    timed only in seconds); ThroughputFileError where it is not a positive number."""
    tflops = record.get("tflops")
    if tflops is None:
        return None
    if isinstance(tflops, bool) or not isinstance(tflops, (int, float)) or not tflops > 0:
        raise ThroughputFileError(f"throughput file {path}: record {i} ({model}) has no "
                                  f"positive 'tflops', got {tflops!r}")
    return float(tflops)


def load_throughput(path: str | Path, mode: str | None = None) -> dict[str, Throughput]:
    """Measured throughput per model from a JSON file: a list of records (or an object with a
    `records` list), each `{what, tflops, ...}` as `ci/gpu-check.sh` writes them (`model`,
    `device`, `mode`, `img_per_s`, `ok`, `shape` are read where present). A record counts when
    `ok` is not false, it names a model (`model`, or a registered model's name in `what`), it
    has a `tflops` (null: it measured none) and, with `mode`, `mode_filter(mode)` selects its
    `mode`; it stands for its `shape` (`fedhet bench --models`) where it names one, else for its
    model, and per shape or model the fastest such record is kept. Raises ThroughputFileError
    naming the file and what is wrong with it, ValueError for an unknown `mode`."""
    from fedhet.models import MODELS

    selects = mode_filter(mode) if mode is not None else None
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ThroughputFileError(f"throughput file {path} does not exist; run ci/gpu-check.sh "
                                  "on the GPU machine to write gpu-check.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ThroughputFileError(f"throughput file {path} is not valid JSON ({err})") from None
    records = data.get("records") if isinstance(data, dict) else data
    if not isinstance(records, list):
        raise ThroughputFileError(f"throughput file {path}: expected a list of records or an "
                                  "object with a 'records' list")
    found: dict[str, Throughput] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ThroughputFileError(f"throughput file {path}: record {i} is not an object")
        model = _model_of(record, MODELS.names())
        if record.get("ok") is False or model is None:
            continue
        if selects is not None and not selects(record.get("mode")):
            continue
        tflops = _tflops(record, path, i, model)
        if tflops is None:
            continue
        where = ", ".join(str(record[k]) for k in ("what", "mode", "device") if record.get(k))
        key = str(record.get("shape") or model)
        if key not in found or tflops > found[key].tflops:
            found[key] = Throughput(tflops, f"measured: {path.name} ({where})")
    if not found:
        raise ThroughputFileError(_nothing_usable(path, records, mode))
    return found


def _nothing_usable(path: Path, records: list[Any], mode: str | None) -> str:
    """Why a throughput file gave no model a throughput, and what to do."""
    if mode is None:
        return (f"throughput file {path}: no usable record names a model (give each record "
                "'model', or name the model in 'what', and a positive 'tflops')")
    modes = sorted({str(r["mode"]) for r in records
                    if isinstance(r, dict) and r.get("mode") not in (None, "", "-")})
    return (f"throughput file {path}: no usable record in mode {mode!r} names a model; the "
            f"file's modes: {', '.join(modes) or 'none'} (give --mode a precision such as "
            "bf16 to take the fastest record in it, or leave --mode out)")

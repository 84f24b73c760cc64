"""Write files atomically: to a temporary file in the same directory, then rename.

A killed process never leaves a half-written result behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

# The process umask, read once (os.umask can only be read by setting it).
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_with(path: str | os.PathLike, writer: Callable[[IO[bytes]], None]) -> Path:
    """Call `writer(fh)` on a temporary file next to `path` and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as fh:
            writer(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_with(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    return write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def write_yaml(path: str | os.PathLike, obj: Any) -> Path:
    import yaml

    return write_text(path, yaml.safe_dump(obj, sort_keys=False))


def torch_save(path: str | os.PathLike, obj: Any) -> Path:
    import torch

    return write_with(path, lambda fh: torch.save(obj, fh))

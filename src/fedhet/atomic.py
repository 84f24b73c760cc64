"""Write files atomically: to a temporary file in the same directory, then rename.

A killed process never leaves a half-written result behind.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

# The process umask, read once (os.umask can only be read by setting it).
_UMASK = os.umask(0)
os.umask(_UMASK)


def set_umask(mask: int) -> None:
    """Set the process umask to `mask`, here as well (a fork server's worker takes on its
    client's)."""
    global _UMASK
    os.umask(mask)
    _UMASK = mask


_HOST = socket.gethostname()
# A temporary file untouched this long belongs to no live writer, whatever host wrote it.
STALE_SECONDS = 3600.0


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Delete the temporary files of earlier writes to `path` that were killed mid-write: those
    of a process of this host that no longer runs, and any untouched for `STALE_SECONDS`."""
    removed = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        parts = tmp.name[len(path.name) + 2:-len(".tmp")].rsplit(".", 2)  # host, pid, random
        try:
            owner_gone = (len(parts) == 3 and parts[0] == _HOST
                          and not pid_alive(int(parts[1])))
            if owner_gone or time.time() - tmp.stat().st_mtime > STALE_SECONDS:
                tmp.unlink()
                removed.append(tmp)
        except (ValueError, OSError):
            continue
    return removed


def write_with(path: str | os.PathLike, writer: Callable[[IO[bytes]], None]) -> Path:
    """Call `writer(fh)` on a temporary file next to `path` and rename it into place (first
    removing what killed writes to `path` left behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_HOST}.{os.getpid()}.",
                               suffix=".tmp")
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

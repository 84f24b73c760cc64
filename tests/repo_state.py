"""Which tests can see the repository's state: those marked `repo_state`, and no other.

The state is what the workflow and its tools write into the repository (ignored by git):
results/, resources/, reports/, .snakemake/, .ckpt/ and gpu-check.json. A test must
pass whatever they hold, so CI runs the marked tests a second time once its steps have built
them (.ci/run); the marker is what picks them, so it must not miss one. A test without it
(tests/conftest.py):
  - runs in an empty working directory of the session (`Guard.unmarked`), so that relative
    paths (its own, the package's defaults such as resources/datasets, and those of the
    processes it starts) cannot reach the repository's state;
  - fails when it opens, lists, stats, creates or removes a path of the state (`Guard.audit`, an
    audit hook on the interpreter's file and process events, and os.stat and os.lstat, which
    raise none, wrapped while it runs), or starts a process in the repository's top folder or
    with a path of the state among its arguments;
  - fails when the state changed while it ran (`Guard.listing`: the modification times of the
    state's folders, so that files written, renamed or removed by any process count).

Under pytest-xdist (`-n 2`) the workers take turns (`Turns`): a marked test, which may change the
state, runs while no other worker runs an unmarked one, so a change is always the running
test's own.
"""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FILE_EVENTS = {"open", "os.stat", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rmdir",
               "os.rename", "os.symlink", "os.link", "os.truncate", "os.utime", "os.chmod",
               "shutil.rmtree", "shutil.copyfile", "shutil.copytree", "shutil.move"}
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec"}
HELP = ("Mark the test `@pytest.mark.repo_state` if it depends on what the repository holds; "
        "else give it paths under tmp_path (and its processes cwd=tmp_path).")


def absolute(path: Any) -> str | None:
    """`path` (str, bytes or path-like; relative to the working directory) made absolute;
    None for what names no path (a file descriptor)."""
    if path is None:
        path = "."
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None
    return os.path.normpath(os.path.join(os.getcwd(), os.fsdecode(os.fspath(path))))


class Guard:
    """Watches one unmarked test at a time (`unmarked`); `problems` says what it did."""

    def __init__(self, workdir: str | os.PathLike, root: str | os.PathLike = ROOT) -> None:
        self.workdir = str(workdir)
        self.root = str(root)
        self.state = tuple(os.path.join(self.root, name) for name in
                           ("results", "resources", "reports", ".snakemake", ".ckpt",
                            "gpu-check.json"))
        self.seen: list[str] | None = None  # None: no unmarked test is running
        self.before: dict[str, int] | None = None  # the last listing, while still true

    def in_state(self, path: Any) -> bool:
        p = absolute(path)
        if p is None:
            return False
        return any(p == s or p.startswith(s + os.sep) for s in self.state)

    def reaches_state(self, cwd: Any) -> bool:
        """Whether relative paths of a process started in `cwd` name the state: in the
        repository's top folder or the state itself (not in a source folder, where the package
        asks git for its commit)."""
        p = absolute(cwd)
        return p == self.root or self.in_state(p)

    def listing(self) -> dict[str, int]:
        """Modification time of every folder of the state (a file written, renamed or removed
        changes its folder's: Snakemake and the package write through renamed temporary
        files), and of the state's files at the top (gpu-check.json)."""
        out: dict[str, int] = {}
        stack = []
        for top in self.state:
            try:
                out[top] = os.lstat(top).st_mtime_ns
                stack.append(top)
            except FileNotFoundError:
                continue
        while stack:
            try:
                entries = os.scandir(stack.pop())
            except (NotADirectoryError, FileNotFoundError):
                continue
            with entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        try:
                            out[e.path] = e.stat(follow_symlinks=False).st_mtime_ns
                        except FileNotFoundError:
                            continue
                        stack.append(e.path)
        return out

    def audit(self, event: str, args: tuple) -> None:
        """The audit hook (sys.addaudithook): notes what the running test touched."""
        if self.seen is None or (event not in FILE_EVENTS and event not in PROCESS_EVENTS):
            return
        try:
            self.note(event, args)
        except Exception as err:  # an audit hook's exception would fail the audited call
            self.seen.append(f"{event}: {err!r} while checking {args!r:.200}")

    def note(self, event: str, args: tuple) -> None:
        if event in FILE_EVENTS:
            for arg in args[:2]:  # the path(s): (path, mode, ...), (src, dst, ...)
                if isinstance(arg, (str, bytes, os.PathLike)) and self.in_state(arg):
                    self.seen.append(f"{event} {absolute(arg)}")
            return
        argv = args[0] if event == "os.system" else args[1]
        words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or ())
        words = [os.fsdecode(os.fspath(w)) for w in words
                 if isinstance(w, (str, bytes, os.PathLike))]
        shown = " ".join(words)[:200]
        cwd = args[2] if event == "subprocess.Popen" else None
        if self.reaches_state(cwd):
            self.seen.append(f"started `{shown}` in {absolute(cwd)}, where relative paths "
                             "reach the repository's state")
        elif any(os.path.isabs(w) and self.in_state(w) for w in words):
            self.seen.append(f"started `{shown}` on a path of the repository's state")

    @contextmanager
    def unmarked(self) -> Iterator[None]:
        """Run an unmarked test in the session's working directory, watched."""
        here, stats = os.getcwd(), (os.stat, os.lstat)
        if self.before is None:
            self.before = self.listing()
        self.seen = []
        os.chdir(self.workdir)
        os.stat, os.lstat = (self.watched(f) for f in stats)  # Path.exists, os.path.isfile...
        try:
            yield
        finally:
            os.stat, os.lstat = stats
            os.chdir(here)
            self.seen = None

    def watched(self, stat: Callable[..., os.stat_result]) -> Callable[..., os.stat_result]:
        """`stat` (os.stat or os.lstat), noting its path as the audit event "os.stat"."""
        @functools.wraps(stat)
        def call(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            self.audit("os.stat", (path,))
            return stat(path, *args, **kwargs)
        return call

    @contextmanager
    def marked(self) -> Iterator[None]:
        """Run a marked test unwatched; it may change the state."""
        try:
            yield
        finally:
            self.before = None

    def problems(self, listing: bool) -> list[str]:
        """What the running test did since the last call (then forgotten); with `listing`,
        the state's changes too (one listing a test: at its end)."""
        seen, self.seen = self.seen, None  # the listing is no test's doing
        found = list(dict.fromkeys(seen or []))
        changed: list[str] = []
        if listing:
            after, before = self.listing(), self.before or {}
            changed = sorted(p for p in after.keys() | before.keys()
                             if after.get(p) != before.get(p))
            self.before = after
        self.seen = [] if seen is not None else None
        if changed:
            found.append("the state changed while it ran: " + ", ".join(
                os.path.relpath(p, self.root) for p in changed[:5])
                + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""))
        return found


class Turns:
    """The turns of the workers of one xdist session around the state: a writers-first
    readers-writer lock over files in a folder they share. Marked tests write (one at a time,
    no unmarked test running), unmarked tests read (together); a writer waiting at the gate
    lets no new reader in, so a marked test waits for one test at most. Writers count
    themselves, so that a reader lists the state afresh after one ran (`Guard.before`).
    POSIX record locks (`fcntl.lockf`), which a process a test forks does not inherit: a child
    that outlives its test holds no turn."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.gate = os.path.join(folder, "gate")
        self.room = os.path.join(folder, "room")
        self.writers = os.path.join(folder, "writers")
        self.seen: str | None = None

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Run a marked test alone."""
        with _locked(self.gate, fcntl.LOCK_EX), _locked(self.room, fcntl.LOCK_EX):
            try:
                yield
            finally:
                count = int(_read(self.writers) or 0)
                with open(self.writers, "w") as f:
                    f.write(str(count + 1))

    @contextmanager
    def reading(self, guard: Guard) -> Iterator[None]:
        """Run an unmarked test beside other unmarked ones; forget `guard`'s listing if a
        marked test ran since this worker's last turn."""
        with _locked(self.gate, fcntl.LOCK_EX):
            room = _lock(self.room, fcntl.LOCK_SH)
        try:
            count = _read(self.writers)
            if count != self.seen:
                guard.before, self.seen = None, count
            yield
        finally:
            os.close(room)


def _lock(path: str, how: int) -> int:
    """A descriptor of `path` holding a lock on it (closing it releases the lock)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _locked(path: str, how: int) -> Iterator[None]:
    fd = _lock(path, how)
    try:
        yield
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None

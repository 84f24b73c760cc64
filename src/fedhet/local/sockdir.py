"""The fork server's private directory and the socket in it, made and removed through the
directories' descriptors rather than their paths: where the temporary directory is shared and
not sticky, another user may rename the server's directory and put a link to somewhere else in
its place, and a removal by path would then delete what the link points to. The server removes
only the socket and directory it made (same device and inode), and says what it left."""

from __future__ import annotations

import os
import secrets
import socket
import stat
from dataclasses import dataclass

SOCKET = "socket"


@dataclass
class PrivateDir:
    """A directory made by this process: its parent's descriptor and its name in it, its own
    descriptor, and the identities (device, inode) of it and of the socket bound in it."""

    parent: int
    name: str
    fd: int
    ident: tuple[int, int]
    path: str
    socket: tuple[int, int] | None = None

    @property
    def socket_path(self) -> str:
        return os.path.join(self.path, SOCKET)

    def close(self) -> None:
        """Close the descriptors (in a forked process that does not remove anything)."""
        for fd in (self.fd, self.parent):
            os.close(fd)


def _ident(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def make(parent_path: str, prefix: str) -> PrivateDir:
    """A new directory of mode 0700 with an unpredictable name in `parent_path`."""
    parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            name = f"{prefix}{secrets.token_hex(8)}"
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
                break
            except FileExistsError:
                continue
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except BaseException:
        os.close(parent)
        raise
    os.fchmod(fd, 0o700)  # whatever the umask took away from the owner
    return PrivateDir(parent, name, fd, _ident(os.fstat(fd)), os.path.join(parent_path, name))


def bind(server: socket.socket, directory: PrivateDir) -> None:
    """Bind `server` in `directory` itself (from within it, not through its path) with umask
    077, so that only this user may connect."""
    cwd = os.getcwd()
    old = os.umask(0o077)
    try:
        os.fchdir(directory.fd)
        server.bind(SOCKET)
    finally:
        os.umask(old)
        os.chdir(cwd)
    directory.socket = _ident(os.stat(SOCKET, dir_fd=directory.fd, follow_symlinks=False))


def _remove_own(name: str, dir_fd: int, ident: tuple[int, int] | None, remove,
                path: str) -> str | None:
    """Remove `name` (at `path`) in the directory `dir_fd` with `remove` when it is still the
    one this process made (`ident`); what was left and why, else None."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if ident is None or _ident(info) != ident:
            return (f"left {path} in place: it is not what the server made there "
                    f"(now {stat.filemode(info.st_mode)}, device {info.st_dev}, inode "
                    f"{info.st_ino})")
        remove(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"could not remove {path} ({err.strerror or err})"
    return None


def remove(directory: PrivateDir) -> list[str]:
    """Remove the socket and the directory made in `make` and `bind`, through the descriptors
    opened then, and close them; what was left in place and why (nothing when all went)."""
    left = []
    if directory.socket is not None:
        left.append(_remove_own(SOCKET, directory.fd, directory.socket, os.unlink,
                                directory.socket_path))
    left.append(_remove_own(directory.name, directory.parent, directory.ident, os.rmdir,
                            directory.path))
    directory.close()
    return [why for why in left if why]

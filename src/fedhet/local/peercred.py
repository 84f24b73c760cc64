"""Who is on the other end of a connected UNIX socket, as the kernel says: the peer's pid and
uid (SO_PEERCRED on Linux; LOCAL_PEERCRED and LOCAL_PEERPID on macOS). The fork server and its
clients talk only to processes of their own user, and a client only to the server its workflow
started. On a system without such a check they do not talk at all."""

from __future__ import annotations

import os
import socket
import struct
import sys
from dataclasses import dataclass

# macOS <sys/un.h>: the option level of UNIX sockets and its two credential options.
_SOL_LOCAL = getattr(socket, "SOL_LOCAL", 0)
_LOCAL_PEERCRED = getattr(socket, "LOCAL_PEERCRED", 1)
_LOCAL_PEERPID = getattr(socket, "LOCAL_PEERPID", 2)
_XUCRED = struct.Struct("=IIh2x16I")  # cr_version, cr_uid, cr_ngroups, cr_groups[NGROUPS]


class Unavailable(OSError):
    """This system gives no way (that fedhet knows) to ask who is on the other end."""


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int


def peer(conn: socket.socket) -> Peer:
    """The pid and uid of the process on the other end of the connected UNIX socket `conn`
    (of a server: the process that called listen())."""
    if sys.platform.startswith("linux"):
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("=iII"))
        pid, uid, _ = struct.unpack("=iII", raw)
        return Peer(pid, uid)
    if sys.platform == "darwin":
        raw = conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED.size)
        version, uid = struct.unpack_from("=II", raw) if len(raw) >= 8 else (None, None)
        if version != 0:  # XUCRED_VERSION
            raise Unavailable(f"LOCAL_PEERCRED answered {raw!r}, not a struct xucred")
        (pid,) = struct.unpack("=i", conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, 4))
        return Peer(pid, uid)
    raise Unavailable(f"{sys.platform} has no peer-credential check fedhet knows "
                      "(SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS)")


def check_available() -> None:
    """Raise Unavailable unless `peer` tells this process's own pid and uid on a socket pair."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        try:
            found = peer(ours)
        except Unavailable:
            raise
        except OSError as err:
            raise Unavailable(f"asking a socket for its peer failed ({err.strerror or err})") from err
    expected = Peer(os.getpid(), os.getuid())
    if found != expected:
        raise Unavailable(f"the kernel named {found} as the peer of a socket pair, not {expected}")

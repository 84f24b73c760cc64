"""What a process passes on to a command it starts besides its arguments, directory and
environment, and that changes what the command writes or how it runs: the umask (file modes),
the resource limits, the niceness, the CPUs it may run on, the blocked signals and the signals
it ignores (`nohup` ignores SIGHUP, a background job SIGINT). A fork server's client sends its
own (`capture`) and the worker takes them on (`adopt`) before it runs the command, so that a
served command runs as it would in a process of its own; where the worker could not take one
on (a higher limit or priority than the server's), the server declines the command
(`unmet`)."""

from __future__ import annotations

import os
import resource
import signal

from fedhet import atomic

# the resource limits a process has (RLIMIT_* that this system knows)
LIMITS = sorted(name for name in dir(resource) if name.startswith("RLIMIT_"))
# signals whose disposition Python takes over from the process that started it (it sets its
# own for SIGINT unless ignored, and ignores SIGPIPE and SIGXFSZ whatever it was given)
INHERITED = [getattr(signal, name) for name in
             ("SIGHUP", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGINT")
             if hasattr(signal, name)]


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def capture() -> dict:
    """This process's state, as JSON-ready values."""
    state = {
        "umask": _umask(),
        "limits": {name: list(resource.getrlimit(getattr(resource, name))) for name in LIMITS},
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "ignored": [int(s) for s in INHERITED if signal.getsignal(s) == signal.SIG_IGN],
    }
    if hasattr(os, "sched_getaffinity"):
        state["cpus"] = sorted(os.sched_getaffinity(0))
    return state


def _ints(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def malformed(state: object) -> str | None:
    """What is wrong with a `state` received from elsewhere (None when `capture` could have
    made it)."""
    if not isinstance(state, dict) or type(state.get("umask")) is not int:
        return "its state has no umask"
    if type(state.get("nice")) is not int:
        return "its state has no niceness"
    limits = state.get("limits")
    if not isinstance(limits, dict) or not all(_ints(v) and len(v) == 2 for v in limits.values()):
        return "its state's resource limits are not pairs of numbers"
    if not all(_ints(state.get(key, [])) for key in ("blocked", "ignored", "cpus")):
        return "its state's signals or CPUs are not lists of numbers"
    if "blocked" not in state or "ignored" not in state:
        return "its state has no signals"
    return None


def _at_most(a: int, b: int) -> bool:
    """a <= b for resource limits (RLIM_INFINITY above every number)."""
    if b == resource.RLIM_INFINITY:
        return True
    return a != resource.RLIM_INFINITY and a <= b


def unmet(state: dict) -> str | None:
    """Why this process could not take on `state` (a limit above its own hard limit, a higher
    priority than its own: raising either takes privileges; CPUs it may not run on); None
    when it can."""
    for name, (_, hard) in state["limits"].items():
        if name in LIMITS:
            ours = resource.getrlimit(getattr(resource, name))[1]
            if not _at_most(hard, ours):
                return f"the job's hard {name} is {hard}, above the server's {ours}"
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    if state["nice"] < ours:
        return f"the job's niceness is {state['nice']}, below the server's {ours}"
    if "cpus" in state and hasattr(os, "sched_getaffinity"):
        extra = set(state["cpus"]) - os.sched_getaffinity(0)
        if extra:
            return f"the job may run on CPUs {sorted(extra)}, the server not"
    return None


def adopt(state: dict) -> None:
    """Take on `state` (one that `unmet` passed) in this process."""
    atomic.set_umask(state["umask"])
    for name, (soft, hard) in state["limits"].items():
        if name in LIMITS and list(resource.getrlimit(getattr(resource, name))) != [soft, hard]:
            resource.setrlimit(getattr(resource, name), (soft, hard))
    if state["nice"] != os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, state["nice"])
    if "cpus" in state and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, state["cpus"])
    for signum in INHERITED:
        if signum in state["ignored"]:
            signal.signal(signum, signal.SIG_IGN)
        elif signum == signal.SIGINT:
            signal.signal(signum, signal.default_int_handler)
        else:
            signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, state["blocked"])

"""No orphans: a process forked by a stage exits within a second once its parent, or the
driver it works for, is gone.

Every process forked by a stage's processes (a pool worker, the pool's manager) watches
its parent from a daemon thread, and a local task also watches the driver itself, so a
driver killed by SIGKILL or the OOM killer does not leave workers holding memory.
"""

from __future__ import annotations

import os
import threading
import time

WATCH_EVERY = 0.5  # seconds


def start_time(pid: int) -> str | None:
    """The kernel's start time of a live process (None when it is gone or a zombie), so
    that a recycled pid is not mistaken for the process we watch."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else fields[19].decode()


def alive(pid: int, started: str | None) -> bool:
    """Is `pid` alive and (when `started` is known) still the process that began then?"""
    if os.path.isdir("/proc"):
        return start_time(pid) == started if started else start_time(pid) is not None
    try:  # pragma: no cover - no /proc (macOS): the pid alone
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


_WATCHED: set[int] = set()


def watch_process(pid: int, parent: bool = False) -> None:
    """Exit this process (at once, status 1) within WATCH_EVERY seconds of `pid` dying.

    With parent=True, also exit when this process is re-parented (its parent died)."""
    if pid in _WATCHED:
        return
    _WATCHED.add(pid)
    started = start_time(pid) if os.path.isdir("/proc") else None

    def watch():
        while True:
            time.sleep(WATCH_EVERY)
            if (parent and os.getppid() != pid) or not alive(pid, started):
                os._exit(1)

    threading.Thread(target=watch, name=f"watch-{pid}", daemon=True).start()


def _watch_parent_after_fork() -> None:
    _WATCHED.clear()  # the parent's watches do not hold in the child
    watch_process(os.getppid(), parent=True)


# Every process forked by a stage's processes (the pool's workers, its manager) watches
# its parent. Forks come only from multiprocessing here; subprocess does not run these.
os.register_at_fork(after_in_child=_watch_parent_after_fork)

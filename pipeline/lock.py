"""Locks on the data folders: one run writes an output at a time, and no run reads a folder
that another is writing.

A run holds an exclusive lock on its output for its whole life, in a file beside it
(`data/.cleaned.lock` for data/cleaned; `data/.pack_parallel.lock` for the files
pack_parallel.py writes into data/), and a shared lock on each folder it reads. The
locks are `flock` locks on that file, so the kernel drops them the moment their process
dies, however it dies. The file also names its holder (pid, host, script, start time)
for the one-line refusal a second run prints:

    error: data/cleaned is locked by clean.py (pid 4242 on host gpu-7, running since
    2026-12-02T10:00:03Z); wait for that run to finish, or stop it

A holder that died leaves its file behind; the next run takes the lock over and says so.
On a filesystem shared by several hosts (the Slurm and Ray executors), `flock` reaches
other hosts only where the filesystem supports it (NFSv4, CephFS, Lustre mounted with
-o flock; not every NFSv3 or FUSE mount). So a holder also touches its file every
HEARTBEAT seconds, and a lock file written by another host is honoured while it was
touched within STALE seconds, whatever flock says. Only the driver takes locks; the
tasks it runs on other nodes write into its staging folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from .disk import naming
from .errors import StageError
from .manifest import display_path
from .orphans import alive, start_time

HEARTBEAT = 30.0   # seconds between touches of a held lock file
STALE = 300.0      # a lock file from another host untouched this long is a dead run's


def lock_path(target: str | os.PathLike, name: str | None = None) -> Path:
    """The lock file of a data folder: beside it, hidden (`data/.cleaned.lock`); with
    `name`, the lock of files a stage writes into a folder (`data/.pack_parallel.lock`)."""
    t = Path(target)
    return t / f".{name}.lock" if name else t.parent / f".{t.name}.lock"


def _host() -> str:
    return socket.gethostname()


def _alive(holder: dict) -> bool:
    """Is the holder (on this host) still the process that wrote the lock file?"""
    pid = holder.get("pid")
    return isinstance(pid, int) and alive(pid, holder.get("pid_start"))


def _read_holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 65536)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}


def _age(path: Path) -> float:
    """Seconds since the lock file was last touched, by the filesystem's own clock (a
    file made now beside it gives 'now'), so clocks of other hosts do not matter."""
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".lock-probe-") as probe:
            now = os.fstat(probe.fileno()).st_mtime
    except OSError:
        now = time.time()
    return max(0.0, now - path.stat().st_mtime)


def describe_holder(h: dict) -> str:
    """'clean.py (pid 4242 on host gpu-7, running since 2026-12-02T10:00:03Z)'"""
    return (f"{h.get('script', 'another run')} (pid {h.get('pid', '?')} on host "
            f"{h.get('host', '?')}, running since {h.get('since', '?')})")


def _open_locked(path: Path, how: int) -> tuple[int | None, dict]:
    """Open the lock file and take `how` (LOCK_EX or LOCK_SH) without waiting: (fd, the
    holder it names); (None, holder) when another process holds a conflicting lock."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None, holder
            raise
        try:   # the file we locked must still be the one at `path` (not unlinked by its
            same = os.fstat(fd).st_ino == os.stat(path).st_ino   # last holder meanwhile)
        except FileNotFoundError:
            same = False
        if same:
            return fd, _read_holder(fd)
        os.close(fd)


def writer_of(folder: str | os.PathLike) -> dict | None:
    """The run that holds the exclusive lock of `folder` now (it may be writing the folder
    for the first time, before it exists), as it recorded itself; None when none does."""
    path = lock_path(folder)
    if not path.exists():
        return None
    try:
        fd, holder = _open_locked(path, fcntl.LOCK_SH)
    except OSError:
        return None
    if fd is None:
        return holder
    os.close(fd)   # free (or only read): nobody writes it
    return None


def _readers(path: Path) -> list[dict]:
    """The runs that hold a shared lock on this folder, as they recorded themselves."""
    out = []
    for p in sorted(path.parent.glob(path.name + ".reader-*")):
        try:
            h = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if h.get("host") == _host() and not _alive(h):
            p.unlink(missing_ok=True)   # a reader that died: its record is stale
            continue
        out.append(h)
    return out


class FolderLock:
    """An exclusive (writer) or shared (reader) lock on a data folder; see the module
    docstring. Use as a context manager or call release()."""

    def __init__(self, target: str | os.PathLike, script: str, shared: bool = False,
                 name: str | None = None, what: str | None = None):
        self.target = Path(target)
        self.path = lock_path(target, name)
        self.script, self.shared = script, shared
        self.what = what or display_path(self.target)
        self.fd: int | None = None
        self.note: str | None = None     # what taking the lock over printed, for tests
        self._stop = threading.Event()
        self._record: Path | None = None
        self._acquire()

    def _me(self) -> dict:
        pid = os.getpid()
        return {"pid": pid, "pid_start": start_time(pid), "host": _host(),
                "script": self.script, "argv": sys.argv[1:],
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, holder = _open_locked(self.path, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
        if fd is None:
            if holder.get("pid") is not None:
                raise StageError(f"{self.what} is locked by {describe_holder(holder)}"
                                 + ("; wait for it to finish writing it, then rerun"
                                    if self.shared else "; wait for that run to finish, or stop it"))
            readers = _readers(self.path)
            who = ", ".join(map(describe_holder, readers)) or "another run"
            raise StageError(f"{self.what} is being read by {who}; wait for it to finish, "
                             "then rerun")
        if holder.get("pid") is not None and holder.get("pid") != os.getpid():
            stale = self._left_behind(holder)
            if stale is None:
                os.close(fd)
                raise StageError(f"{self.what} is locked by {describe_holder(holder)} "
                                 "(on another host, seen within the last "
                                 f"{STALE / 60:.0f} minutes); wait for that run to finish, or "
                                 f"stop it (if it is dead, delete {display_path(self.path)})")
            if not self.shared:
                self.note = (f"note: took over the lock of {self.what} left by "
                             f"{describe_holder(holder)}: {stale}")
                print(self.note, file=sys.stderr)
        self.fd = fd
        tmp = None
        try:
            if self.shared:
                _readers(self.path)   # tidies the records of readers on this host that died
                self._record = self.path.with_name(
                    f"{self.path.name}.reader-{_host()}-{os.getpid()}")
                tmp = self.path.with_name(f".tmp-{self._record.name}")   # whole, or not there
                with naming(tmp):
                    tmp.write_text(json.dumps(self._me()))
                os.replace(tmp, self._record)
            else:
                with naming(self.path):
                    os.ftruncate(fd, 0)
                    os.lseek(fd, 0, os.SEEK_SET)
                    os.write(fd, json.dumps(self._me()).encode())
        except BaseException:
            # a failed write (a full disk, a limit on file size): nothing of this lock
            # stays behind, neither the half-written record nor a lock file no one holds
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.release()
            raise
        if not self.shared:
            threading.Thread(target=self._beat, name="lock-heartbeat", daemon=True).start()

    def _left_behind(self, holder: dict) -> str | None:
        """Why a lock file whose flock is free may be taken over, or None if its holder may
        still run (another host that touched it lately: its flock may not reach here)."""
        if holder.get("host") == _host():
            if _alive(holder):   # alive, yet no flock: the file was replaced under it
                return None
            return "that process is gone"
        age = _age(self.path)
        if age < STALE:
            return None
        return f"its lock file was last touched {age / 60:.0f} minutes ago"

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        if self.fd is None:
            return
        self._stop.set()
        try:
            if self.shared:
                if self._record:
                    self._record.unlink(missing_ok=True)
                try:   # the last reader of a folder nobody writes tidies the empty file
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if not _read_holder(self.fd):
                        self.path.unlink(missing_ok=True)
                except OSError:
                    pass
            else:
                self.path.unlink(missing_ok=True)   # while still held: no one locks it meanwhile
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_all(takes: Iterable[Callable[[], FolderLock]]) -> list[FolderLock]:
    """Take several locks in turn (each take() one FolderLock), all or none: when one
    cannot be taken (another run holds it, a full disk), those taken before it are
    released, or their reader records and lock files would stay behind."""
    held: list[FolderLock] = []
    try:
        for take in takes:
            held.append(take())
    except BaseException:
        for lock in reversed(held):
            lock.release()
        raise
    return held

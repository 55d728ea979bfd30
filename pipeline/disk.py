"""Disk space: a stage says before any work how much it will write and warns when that is
more than is free; when a write fails for lack of space (or a read-only folder, or a
permission), the stage stops with one line naming the folder, the space needed and the
space free, instead of a traceback.

Nothing is lost either way: a stage writes into its staging folder beside the output and
swaps it in only when complete (pipeline.staging), so the previous output is untouched,
and the tasks that finished before the failure are kept for the rerun.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from .errors import StageError
from .manifest import display_path
from .tables import human_bytes

# what a failed write means to a user, by errno
WRITE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large (a limit on file size: ulimit -f?)",
}

# a path taken by the wrong kind of entry (a file named like a folder the run writes)
IN_THE_WAY = {
    errno.ENOTDIR: "a file stands where a folder is expected",
    errno.EISDIR: "a folder stands where a file is expected",
}

# the run under way in this process: what it writes, where, and how much it needs
_RUN: dict = {}


def check_out_path(flag: str, path: str | os.PathLike, folder: bool) -> None:
    """A path a tool writes (a folder, or a file when folder is False), checked before
    any work: one line when a file stands where a folder goes, above it or at it."""
    path = Path(path)
    under = next((d for d in path.absolute().parents if d.exists() and not d.is_dir()), None)
    if under is not None:
        raise StageError(f"{flag} {path}: {under} is a file, not a folder")
    if path.exists() and path.is_dir() != folder:
        raise StageError(f"{flag} {path}: is a {'file' if folder else 'folder'}; "
                         f"name a {'folder' if folder else 'file'}")


def free_bytes(folder: str | os.PathLike) -> int:
    """Bytes free to this user on the file system of `folder` (or of its nearest
    existing parent, when it is not made yet)."""
    p = Path(folder).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def register(staging: Path, output: Path, need) -> None:
    """Record what this run writes (its staging folder, the output it replaces) and how
    to know the bytes it needs (a function, called only when a line needs it)."""
    _RUN.update(staging=Path(staging), output=Path(output), need=need)


def needed() -> int | None:
    need = _RUN.get("need")
    if callable(need):
        try:
            need = need()
        except Exception:   # noqa: BLE001 - an estimate that cannot be made is "unknown"
            need = None
        _RUN["need"] = need
    return need


def expect(staging: Path, output: Path, need: int | None) -> None:
    """Record what this run writes and how many bytes it needs, and warn now when the
    file system has less free."""
    _RUN.update(staging=Path(staging), output=Path(output), need=need)
    if not need:
        return
    free = free_bytes(staging)
    if free < need:
        print(f"warning: {display_path(staging.parent)} has {human_bytes(free)} free and this "
              f"run needs about {human_bytes(need)} there (the new output is written beside "
              f"{display_path(output)} until it is complete): it may stop for lack of space",
              file=sys.stderr)


def forget() -> None:
    _RUN.clear()


@contextmanager
def naming(path: str | os.PathLike):
    """Give an OSError raised without a path (os.write, a file's flush at close) the path
    of the file being written: the one line of a failed write names where it failed."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None


def remove_tree(path: str | os.PathLike) -> None:
    """shutil.rmtree, whose error names the entry that could not be deleted by its whole
    path (rmtree's own names it relative to its folder: the line would say "cannot write .")."""
    def named(func, where, exc_info):
        e = exc_info[1]
        if not isinstance(e, OSError) or e.errno is None:
            raise e
        raise OSError(e.errno, e.strerror, os.fspath(where)) from None

    shutil.rmtree(path, onerror=named)


def write_error_line(e: BaseException) -> str | None:
    """The one line for a failed write (OSError with an errno of WRITE_ERRORS): where, why,
    the space needed and free, and that nothing was lost; for a path taken by the wrong
    kind of entry (IN_THE_WAY), that path. None for any other error."""
    if isinstance(e, OSError) and e.errno in IN_THE_WAY and (e.filename2 or e.filename):
        line = f"{display_path(Path(e.filename2 or e.filename))}: {IN_THE_WAY[e.errno]}"
        return line + _unchanged(_RUN.get("output"))
    if not isinstance(e, OSError) or e.errno not in WRITE_ERRORS:
        return None
    staging, output, need = _RUN.get("staging"), _RUN.get("output"), needed()
    # of a rename's two paths, the destination: its source is the run's own (the task
    # logs moving from the staging folder to data/logs)
    failed = e.filename2 or e.filename
    where = Path(os.fsdecode(failed)).parent if failed else staging
    if where is None:
        return f"cannot write: {WRITE_ERRORS[e.errno]}"
    try:
        free = human_bytes(free_bytes(where))
    except OSError:
        free = "unknown"
    needs = f"this run needs about {human_bytes(need)} there" if need else "space needed unknown"
    line = f"cannot write {display_path(where)}: {WRITE_ERRORS[e.errno]} ({needs}, {free} free)"
    return line + _unchanged(output)


def _unchanged(output) -> str:
    """What a failed run left: the previous output as it was, the finished tasks kept."""
    if output is None:
        return ""
    return (f"; {display_path(output)} is unchanged; fix this and rerun the same command "
            "(finished tasks are kept)")


def temporary_beside(dest: Path) -> Path:
    """A name of its own beside `dest` for writing it before the rename over it: hidden,
    with this process's id and a random part, so never a file of the user's (such as
    report.md.tmp, which a fixed suffix would overwrite, then rename away)."""
    dest = Path(dest)
    return dest.with_name(f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def check_report_path(path: Path, flag: str, suffix: str, starts: str) -> None:
    """Refuse a report path that could overwrite something else: a report is written
    whole over `path`, so `path` must end in `suffix` and, if it exists, be a report of
    the same kind already (its text starts with `starts`), not a shard, a manifest or a
    packed .bin given by mistake."""
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise StageError(f"{flag} {path}: must name a {suffix} file (the report is written "
                         "whole over it)")
    if path.is_dir():
        raise StageError(f"{flag} {path}: is a folder; name a {suffix} file")
    if path.exists():
        try:
            with open(path, "rb") as f:
                head = f.read(4096).decode("utf-8", errors="replace")
        except OSError as e:
            raise StageError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
        if starts not in head:
            raise StageError(f"{flag} {path}: exists and is not a report this script wrote; "
                             "name a new file or remove it first")


def report_write_failed(e: OSError, path: Path, report: Path) -> StageError:
    """The one line for a write of a report's own that failed (verify's work folder, a
    report or the file beside it): the path, why, and that the previous report is kept. A
    StageError, so exit 2 as every stage's write errors: verify's exit 1 says a check
    FAILed, which a full disk says nothing about."""
    why = WRITE_ERRORS.get(e.errno) or IN_THE_WAY.get(e.errno) or e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        with contextlib.suppress(OSError):
            why += f" ({human_bytes(free_bytes(path.parent))} free)"
    kept = (f"the previous report {display_path(report)} is unchanged" if report.is_file()
            else "no report was written")
    return StageError(f"cannot write {display_path(path)}: {why}; {kept}")


def replace_whole(files: dict[Path, bytes]) -> None:
    """Write a report (the first of `files`) and the files beside it, each whole under a
    name of its own (temporary_beside) before any is renamed over its path: a write that
    fails (a full disk, a size limit, a read-only folder) leaves the previous files as
    they were, without temporary files, and stops with one line (report_write_failed)
    instead of a traceback."""
    report = next(iter(files))
    tmps = {path: temporary_beside(path) for path in files}
    where = report
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        for path, body in files.items():
            where = path
            with open(tmps[path], "xb") as f:
                f.write(body)
        for path, tmp in tmps.items():
            where = path
            os.replace(tmp, path)
    except OSError as e:
        for tmp in tmps.values():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise report_write_failed(e, where, report) from None

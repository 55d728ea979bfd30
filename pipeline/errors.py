"""One-line errors for bad input, and the wrapper that turns them into an exit code."""

from __future__ import annotations

import gc
import sys
from typing import Callable


class StageError(Exception):
    """A problem with the input or the configuration that the user must fix.

    Raised with a one-line message that names the file or value at fault. The stage
    wrapper prints it (no traceback) and exits with status 2.
    """


def run_stage(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    """Run a stage's main(); print StageError, and a write that failed for lack of space
    or permission or because a file stands where a folder goes (pipeline.disk), as one
    line and exit non-zero."""
    try:
        rc = main(argv)
    except StageError as e:
        print(f"error: {e}", file=sys.stderr)
        _exit(2)
    except BrokenPipeError:   # the reader of a pipe quit early (`| head`)
        _stdout_closed()
    except OSError as e:
        from .disk import write_error_line

        line = write_error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        _exit(2)
    except KeyboardInterrupt:
        print("interrupted: partial work is kept for resume; the previous output is untouched",
              file=sys.stderr)
        _exit(130)
    _exit(int(rc or 0))


def _stdout_closed() -> None:
    """Standard output went to a pipe whose reader quit: one line to stderr (if it is still
    open) instead of a traceback, and the exit status of a process killed by SIGPIPE."""
    import os

    try:   # the interpreter's last flush of stdout would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("stopped: standard output was closed (a pipe into head?) before everything "
              "was printed; what was already written stays", file=sys.stderr)
    except OSError:
        pass
    _exit(141)


def _exit(code: int) -> None:
    """Exit with `code`. Every output is written, closed and committed by now, so the
    objects alive are frozen first: the interpreter's last garbage collection then skips
    the hundreds of thousands that numba, pyarrow and datatrove create on import (0.1-0.2 s
    of every run, longer than some reruns' work). Exit handlers still run and the
    standard streams are still flushed."""
    gc.freeze()
    sys.exit(code)

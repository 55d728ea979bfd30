"""One-line errors for bad input, and the wrapper that turns them into an exit code."""

from __future__ import annotations

import argparse
import dis
import gc
import os
import re
import signal
import sys
import threading
from typing import Callable


class StageError(Exception):
    """A problem with the input or the configuration that the user must fix.

    Raised with a one-line message that names the file or value at fault. The stage
    wrapper prints it (no traceback) and exits with status 2.
    """


class InputError(StageError):
    """A StageError that a rerun with the same input and settings would only repeat (an
    algorithm refused the input: see refusal()): the run's partial work promises no
    resume."""


ALGORITHMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "algorithms") + os.sep


def refusal(e: BaseException) -> InputError | None:
    """An algorithm's refusal as the one-line error, or None for any other exception.

    The modules of algorithms/ import nothing of this package: they raise ValueError with
    a message for the user (a rule's measure that gave the wrong count, a tokenizer file
    that is not one). That is a ValueError raised by a `raise` statement in a module of
    algorithms/; one raised inside numpy or another library (a bug, most likely) keeps
    its traceback."""
    if not isinstance(e, ValueError) or isinstance(e, StageError):
        return None
    tb = e.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if not code.co_filename.startswith(ALGORITHMS):
        return None
    if code.co_code[tb.tb_lasti] != _RAISE:   # an exception from a call on this line
        return None
    return InputError(str(e))


_RAISE = dis.opmap["RAISE_VARARGS"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, as every other error of a stage is:
    the flag and the value at fault, and where the flags are listed. argparse's own
    printed the whole usage first (15 lines for a stage) and the error after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a negative size with its unit ("-1GB") is a value, as "-5" is to argparse, so
        # the flag's own check can say what is wrong with it; argparse took it for a flag
        # and said "expected one argument"
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?"
                                                   r"\s*[A-Za-z]*$")

    def error(self, message: str):
        self.exit(2, f"error: {message} ({self.prog} --help lists the flags)\n")


class Stopped(KeyboardInterrupt):
    """SIGTERM (a scheduler's time limit, `kill PID`) or SIGHUP (the terminal closed),
    raised where Ctrl-C's KeyboardInterrupt would be, so the run stops the same way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_DRIVER_PID: list[int] = []


def _stop(signum, frame) -> None:
    if os.getpid() not in _DRIVER_PID:   # a process forked from the driver, before it set
        signal.signal(signum, signal.SIG_DFL)   # the default back (a pool worker starting,
        os.kill(os.getpid(), signum)            # the pool terminated at exit): die as before
        return
    raise Stopped(signum)


def catch_stop_signals() -> None:
    """SIGTERM and SIGHUP stop a stage as Ctrl-C does: one line, the partial work kept.
    Only where they would otherwise kill at once (a SIGHUP ignored under nohup stays
    ignored), and only in the driver (the pool's workers set them back; see
    pipeline.local_pool)."""
    if threading.current_thread() is not threading.main_thread():
        return
    _DRIVER_PID[:] = [os.getpid()]
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is signal.SIG_DFL:
            signal.signal(s, _stop)


def default_stop_signals() -> None:
    """In a forked pool worker: the default action for SIGTERM and SIGHUP again, and
    Ctrl-C ignored. The driver answers Ctrl-C for the whole stage (one line) and drops
    its workers; a worker's own KeyboardInterrupt printed a traceback each, and one raised
    while it read the task queue left the queue's lock held for the pool's shutdown."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is _stop:
            signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class StdoutError(OSError):
    """Standard output could not be written (a full disk under `> file`, say): not a
    write of the stage's output, which pipeline.disk would name."""


class _Stdout:
    """sys.stdout, whose failed writes raise StdoutError (a pipe whose reader quit still
    raises BrokenPipeError); everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def write(self, s):
        return self._guard(self._stream.write, s)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run_stage(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    """Run a stage's main(); print StageError, and a write that failed for lack of space
    or permission or because a file stands where a folder goes (pipeline.disk), as one
    line and exit non-zero."""
    catch_stop_signals()
    if not isinstance(sys.stdout, _Stdout) and sys.stdout is not None:
        sys.stdout = _Stdout(sys.stdout)
    try:
        try:
            rc = main(argv)
        except ValueError as e:   # an algorithm's refusal, raised in this process
            bad = refusal(e)
            if bad is None:
                raise
            raise bad from None
    except StageError as e:
        print(f"error: {e}", file=sys.stderr)
        _exit(2)
    except BrokenPipeError:   # the reader of a pipe quit early (`| head`)
        _stdout_closed()
    except StdoutError as e:   # not the data folder's disk: say which
        _stdout_failed(e)
        _exit(2)
    except OSError as e:
        from .disk import write_error_line

        line = write_error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        _exit(2)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        # the workers are dropped (killed), never shut down: one may hold a queue's lock
        pool = sys.modules.get("pipeline.local_pool")
        if pool is not None:
            pool.abandon_pool()
        what = ("interrupted" if signum == signal.SIGINT
                else f"stopped by {signal.Signals(signum).name}")
        print(f"{what}: partial work is kept for resume; the previous output is untouched",
              file=sys.stderr)
        _exit(128 + signum)
    _exit(int(rc or 0))


def _stdout_to_devnull() -> None:
    """Standard output goes to /dev/null from here on: what is left in its buffer is
    dropped, so the last flush cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_failed(e: OSError) -> None:
    """Standard output could not be written: one line to stderr."""
    try:
        _stdout_to_devnull()
    except (OSError, ValueError):
        pass
    print(f"error: standard output could not be written ({e.strerror or e}); rerun "
          "with it going elsewhere", file=sys.stderr)


def _stdout_closed() -> None:
    """Standard output went to a pipe whose reader quit: one line to stderr (if it is still
    open) instead of a traceback, and the exit status of a process killed by SIGPIPE."""
    try:   # the interpreter's last flush of stdout would fail again
        _stdout_to_devnull()
        print("stopped: standard output was closed (a pipe into head?) before everything "
              "was printed; what was already written stays", file=sys.stderr)
    except OSError:
        pass
    _exit(141)


def _exit(code: int) -> None:
    """Exit with `code`. Every output is written, closed and committed by now, so the
    exit handlers run (the pool's shutdown, loguru's, the locks'), the standard streams
    are flushed, and the process ends without the interpreter's tear-down: freeing, one
    by one, the hundreds of thousands of objects that numba, pyarrow and datatrove create
    (0.2-0.3 s of every run that used numba, longer than some reruns' work).

    The usual exit instead when another thread still runs (the interpreter would wait for
    it) or under a profiler or a tracer (cProfile and coverage write their results after
    this returns)."""
    gc.freeze()   # the last garbage collections skip what is alive now
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    import atexit

    pool = sys.modules.get("pipeline.local_pool")
    if pool is not None:   # first, whatever order the exit handlers were registered in
        pool.drop_pool_at_exit()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:   # its reader quit
        code = code or 141
    except (OSError, ValueError) as e:   # a full disk under a redirect, say; or closed
        code = code or 2
        _stdout_failed(e)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)

"""The local executor: datatrove's LocalPipelineExecutor with one pool of workers per
stage process, kept across the stage's phases, and started early.

A stage's second and later phases then start no process at all, and the pool's workers
are forked right after the arguments are read, with every module already imported.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.util
import os
import signal
import sys
from pathlib import Path

from . import collector
from .datatrove_import import import_datatrove_io
from .errors import StageError, default_stop_signals

def _quiet(verbose: bool) -> None:
    if not verbose:
        from loguru import logger
        logger.disable("datatrove")


# One pool of workers per stage process, reused by every phase: a stage's second and
# later phases then start no process at all.
_POOL: dict = {}


def _stage_pool(workers: int, start_method: str):
    """The stage's pool of `workers` processes, created on first use and kept; created
    again when one of its processes has died since (between two phases, say: a worker
    killed while it held the task queue's lock would leave the next phase waiting)."""
    import multiprocess

    dead = _dead(_POOL.get("procs", []))
    if _POOL.get("workers") != workers or dead:
        abandon_pool() if dead else close_pool()
        # each worker takes SIGTERM's and SIGHUP's default action again: the driver's
        # handler, inherited through the fork, only runs on a process's main thread, and a
        # worker waiting for a task there never sees one delivered to its other threads
        # (pyarrow's, the orphan watch): the pool's SIGTERM at exit then left it alive
        pool = multiprocess.get_context(start_method).Pool(workers,
                                                           initializer=default_stop_signals)
        # every process the pool started: none exits while the pool is open
        _POOL.update(workers=workers, pool=pool, procs=list(pool._pool), pid=os.getpid())
        # run before multiprocess's own exit handler (they run last registered, first)
        atexit.unregister(drop_pool_at_exit)
        atexit.register(drop_pool_at_exit)
    return _POOL["pool"]


def _dead(procs: list) -> list:
    return [p for p in procs if p.exitcode is not None]


def abandon_pool() -> None:
    """Stop the stage's pool after one of its workers died, without Pool.terminate().

    A worker killed while it waited for a task held the task queue's read lock (one
    killed while it sent a result, the result queue's write lock), and terminate() waits
    for those locks forever. So the pool is told to start no more workers, every worker
    is killed, and the pool is dropped without its finalizer; its handler threads are
    daemons, left to end with the process."""
    from multiprocess.pool import TERMINATE

    pool = _POOL.get("pool")
    if pool is not None:
        handler = pool._worker_handler
        handler._state = TERMINATE                  # no more workers, once it wakes:
        pool._change_notifier.put(None)             # wake it, and let it end, since it
        handler.join(timeout=10)                    # may be starting a worker just now
        # (one started after the list below was taken was left alive, holding the pipes)
        procs = {p.pid: p for p in list(pool._pool) + _POOL.get("procs", [])}.values()
        for p in procs:
            if p.exitcode is None:
                p.kill()
        for p in procs:
            p.join(timeout=10)
        pool._state = TERMINATE
        pool._terminate.cancel()
    _POOL.clear()


def drop_pool_at_exit() -> None:
    """When the stage exits, however it exits: its workers are killed (abandon_pool),
    not shut down by the pool's own finalizer. That finalizer takes the task queue's lock,
    sends SIGTERM to the workers that have no sentinel yet and waits for each, without a
    time limit; a worker that lives on then hangs the stage's exit for good. One can: a
    SIGTERM that reaches a worker between its fork and Python's after-fork reset of the
    signal flags is dropped (a stage that fails or finds its output up to date exits right
    after starting its pool), and the driver's handler, which a starting worker still
    has, only runs on the worker's main thread. SIGKILL is never lost. By now every task
    has ended or was given up on: the workers are idle or their work is dropped anyway.
    Only in the process that made the pool (a process forked from it has a copy)."""
    if _POOL.get("pool") is not None and _POOL.get("pid") == os.getpid():
        abandon_pool()


def close_pool() -> None:
    """Stop the stage's pool, letting its workers finish (at exit, drop_pool_at_exit
    kills them instead)."""
    if _POOL.get("pool") is not None:
        _POOL["pool"].close()
        _POOL["pool"].join()
    _POOL.clear()


def _fast_sysconfig_paths() -> None:
    """datatrove adds a loguru log file per task, and loguru recomputes the standard
    library's install paths (hundreds of sysconfig.get_path calls, ~25 ms) for each one;
    the answer never changes within a process, so it is computed once."""
    import functools
    import sysconfig

    if not hasattr(sysconfig.get_path, "cache_info"):
        sysconfig.get_path = functools.lru_cache(maxsize=None)(sysconfig.get_path)


def _local_executor_cls():
    import_datatrove_io()   # without the hub's client, which no local run uses
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.utils.stats import PipelineStats

    class QuietLocalExecutor(LocalPipelineExecutor):
        """datatrove's local executor, with the pool kept across a stage's phases.

        run() is datatrove 0.10's LocalPipelineExecutor.run() with two changes: the pool
        comes from _stage_pool instead of being started (and stopped) for every phase,
        and no manager process hands out local ranks (datatrove uses them only to choose
        which task logs to the console, and ours are quiet). Each task is datatrove's own
        _run_for_rank: its completion marker, log file and stats."""
        verbose = False

        def _run_for_rank(self, rank, local_rank=0, node_rank=-1):
            _quiet(self.verbose)
            _fast_sysconfig_paths()
            return super()._run_for_rank(rank, local_rank, node_rank)

        def run(self):
            if self.workers == 1:   # in this process, one task after another: datatrove's
                return super().run()
            self._launched = True
            ranks = range(self.local_rank_offset, self.local_rank_offset + self.local_tasks)
            if all(map(self.is_rank_completed, ranks)):
                return None
            self.save_executor_as_json()
            pool = _stage_pool(self.workers, self.start_method)
            stats = _results_or_dead_worker(
                pool, pool.imap_unordered(self._run_for_rank, self.get_incomplete_ranks(ranks)))
            stats = sum(stats, start=PipelineStats())
            with self.logging_dir.open("stats.json", "wt") as f:
                stats.save_to_disk(f)
            return stats

    return QuietLocalExecutor


def _results_or_dead_worker(pool, results, poll: float = 0.5) -> list:
    """The pool's results as they come; a StageError when one of its workers dies.

    A worker killed mid-task (by the out-of-memory killer, say) is replaced by the pool,
    but its task is lost and the results never complete: the stage would wait forever.
    The workers never exit while the pool is open, so one that has is reported."""
    from multiprocess import TimeoutError as PoolTimeout

    workers = _POOL.get("procs") or list(pool._pool)
    out = []
    while True:
        try:
            out.append(results.next(timeout=poll))
        except StopIteration:
            return out
        except PoolTimeout:
            dead = _dead(workers)
            if dead:
                code = dead[0].exitcode
                abandon_pool()
                raise StageError(f"a worker process (pid {dead[0].pid}) {_death(code)}")


# what a worker's death by a signal most likely means, and what to do
_SIGBUS_HINT = ("(SIGBUS) while running tasks: a write through a memory-mapped file found "
                "the disk full, or a file it had mapped was truncated or changed by another "
                "process (or shared memory, /dev/shm, ran out); check the free space where "
                "the output is written and that nothing else writes the input, then rerun")
_MEMORY_HINT = ("while running tasks; if memory ran out, rerun with fewer --workers or a "
                "smaller --task-mb")


def _death(code: int) -> str:
    """How a worker that exited with `code` (minus the signal that killed it) ended."""
    if code >= 0:
        return f"exited with status {code} {_MEMORY_HINT}"
    if code == -signal.SIGBUS:
        return f"was killed by signal {-code} {_SIGBUS_HINT}"
    oom = " (SIGKILL: the out-of-memory killer?)" if code == -9 else ""
    return f"was killed by signal {-code}{oom} {_MEMORY_HINT}"


def start_pool_early(args: argparse.Namespace, compiled: bool = False,
                     before_fork=None) -> None:
    """Start the stage's worker pool now, right after the arguments are read (local
    executor, two workers or more): the workers are forked from this process while it
    holds only its imports and no thread, so they start in milliseconds with every module
    already loaded, instead of each phase's first tasks waiting for a fork server to
    import the stage. Later phases reuse the same workers.

    compiled: the tasks run numba kernels; numba's compiler context is set up here first
    (0.5 s a process, starting no thread), so the workers inherit it instead of each
    setting it up again.

    before_fork: called right before the fork (a thread the stage started must have ended:
    a forked worker has only the thread that forked it)."""
    if getattr(args, "executor", "local") != "local" or int(getattr(args, "workers", 1) or 1) < 2:
        return
    # what every task needs, imported once here rather than in each worker (datatrove.io
    # without the hub's client, which no local run uses: pipeline.datatrove_import)
    import_datatrove_io()
    for name in ("datatrove.executor.local", "datatrove.pipeline.base", "datatrove.utils.logging"):
        importlib.import_module(name)
    main = sys.modules.get("__main__")
    stem = Path(getattr(main, "__file__", "") or "").stem
    if stem and importlib.util.find_spec(stem) is not None:
        importlib.import_module(stem)   # tasks name their function by this module
    if compiled:
        from algorithms.jit import prepare_for_fork

        prepare_for_fork()   # nothing, where every kernel was built ahead of time
    if before_fork is not None:
        before_fork()
    collector.resume()   # the workers start collecting, and never walk what is frozen
    _stage_pool(int(args.workers), "fork")


def _preload_in_forkserver(module: str) -> None:
    """Have the pool's fork server import what every task needs before it forks workers.

    Each phase starts a new pool; its workers are forked from one fork server per stage.
    Without this, every worker of every phase imports datatrove, loguru, the stage and
    its libraries again (about half a second each), which is most of a small phase."""
    import multiprocess.forkserver as fs

    wanted = ["__main__", "pipeline.datatrove_preload", "datatrove.executor.local",
              "datatrove.pipeline.base", "pipeline.executors", "pipeline.local_pool",
              "pipeline.orphans", "pipeline.progress", "pipeline.task_results", module]
    if fs._forkserver._forkserver_pid is None:     # only before it starts
        fs.set_forkserver_preload(wanted)


"""Executor selection: every parallel phase of every stage runs through datatrove.

A phase is a function `fn(rank, world_size, **kwargs)` that does task `rank` (usually:
read work unit `rank` of the input, write output shard `rank`; see pipeline.units).
`run_tasks` wraps it as a datatrove pipeline step and runs it with LocalPipelineExecutor
(default), RayPipelineExecutor or SlurmPipelineExecutor, so the code a laptop runs is the
code a cluster runs. Tasks are fixed by the data (units of at most --task-mb MB),
workers only decide how many run at once, so the output never depends on --workers.
datatrove's completion markers let a rerun skip the tasks a killed run had finished.

Every task reports its documents, bytes, CPU time and peak memory (pipeline.progress);
the driver shows one progress bar and records each phase's core use. Beside this module:
the local executor's kept pool (pipeline.local_pool), the watch that leaves no orphan
process (pipeline.orphans) and the tasks' result files (pipeline.task_results).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from . import progress as prog
from .errors import StageError, refusal
from .datatrove_import import import_datatrove_io
from .layout import default_workers
from .local_pool import _local_executor_cls, _preload_in_forkserver, _quiet
from .orphans import watch_process
from .units import DEFAULT_TASK_MB


def add_executor_args(p: argparse.ArgumentParser, task_mb: bool = True) -> None:
    """The executor's flags; task_mb=False for a stage whose tasks are not cut by size
    (download_data.py: one task per group of input files), which then has no --task-mb."""
    g = p.add_argument_group("execution")
    g.add_argument("--workers", type=int, default=default_workers(),
                   help="tasks run at once (default: all cores); never changes the output")
    if task_mb:
        g.add_argument("--task-mb", type=float, default=DEFAULT_TASK_MB,
                       help=f"text per task, in MB (default {DEFAULT_TASK_MB:g}): the input is "
                            "cut into tasks of at most this size, whatever --workers is")
    g.add_argument("--executor", choices=["local", "ray", "slurm"], default="local",
                   help="datatrove executor (default: local)")
    g.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"),
                   help="address of a running Ray cluster (default: $RAY_ADDRESS)")
    g.add_argument("--slurm-partition", default=None)
    g.add_argument("--slurm-time", default="04:00:00")
    g.add_argument("--slurm-cpus", type=int, default=1, help="cpus per Slurm task")
    g.add_argument("--slurm-job-name", default=None)
    g.add_argument("--verbose", action="store_true", help="show datatrove's own logs")


def fn_ref(fn: Callable) -> str:
    """'module:function' for fn, naming a script run as __main__ by its file name: the
    file fn was defined in (under `python -m cProfile script.py` the __main__ module is
    cProfile's, and the script's functions were looked up there)."""
    mod = fn.__module__
    if mod == "__main__":
        path = getattr(fn, "__globals__", {}).get("__file__") or sys.modules["__main__"].__file__
        mod = Path(path).stem
    return f"{mod}:{fn.__qualname__}"


class ShardTask:
    """A datatrove pipeline step that calls `fn(rank, world_size, **kwargs)` for its task.

    Around the call it keeps the task's progress record (in `progress_dir`), and on the
    local executor it watches the driver (`driver_pid`) and exits when the driver is gone.
    """

    def __init__(self, ref: str, kwargs: dict, name: str, sys_path: list[str], cwd: str,
                 progress_dir: str | None = None, driver_pid: int | None = None):
        self.ref, self.kwargs, self.name, self.sys_path, self.cwd = ref, kwargs, name, sys_path, cwd
        self.progress_dir, self.driver_pid = progress_dir, driver_pid

    def __repr__(self) -> str:
        return f"ShardTask({self.name}: {self.ref})"

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        for p in self.sys_path:
            if p not in sys.path:
                sys.path.insert(0, p)
        # Ray and Slurm workers start elsewhere: relative paths are the driver's
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        if self.driver_pid and self.driver_pid != os.getpid():
            watch_process(self.driver_pid)
        module, _, func = self.ref.partition(":")
        fn = getattr(importlib.import_module(module), func)
        prog.start_task(self.progress_dir, rank)
        try:
            fn(rank=rank, world_size=world_size, **self.kwargs)
        except ValueError as e:   # an algorithm's refusal: one line, in the driver too
            bad = refusal(e)
            if bad is None:
                raise
            raise bad from None
        finally:
            prog.end_task()
        return None



# Ray is not in requirements.txt: what one machine runs needs none of its 240 MB
NO_RAY = "--executor ray needs ray: pip install -r requirements-cluster.txt"


def check_executor(args: argparse.Namespace) -> str | None:
    """The cluster an --executor names, checked before any work (one line each): ray
    installed, an address, and something answering there; sbatch on PATH and a partition
    for slurm; a note when a local run is given more workers than cores. Returns the Ray
    address (None for the other executors)."""
    kind = getattr(args, "executor", "local")
    workers, cores = int(getattr(args, "workers", 1) or 1), default_workers()
    if kind == "local" and workers > cores:   # a typo, or a laptop given a server's flags
        print(f"note: --workers {workers} is more than the {cores} cores this process may "
              "use: the extra workers share them (faster only where tasks wait on the "
              "network or the disk), and each holds its own memory", file=sys.stderr)
    if kind == "slurm":
        if not getattr(args, "slurm_partition", None):
            raise StageError("--executor slurm needs --slurm-partition")
        if shutil.which("sbatch") is None:
            raise StageError("--executor slurm: sbatch is not on PATH (run from a Slurm "
                             "login node, or use --executor local)")
        return None
    if kind != "ray":
        return None
    if importlib.util.find_spec("ray") is None:
        raise StageError(NO_RAY)
    addr = getattr(args, "ray_address", None) or os.environ.get("RAY_ADDRESS")
    if not addr:
        raise StageError("--executor ray needs --ray-address or RAY_ADDRESS "
                         "(the address of a running Ray cluster)")
    host, _, port = addr.rpartition(":")
    if host and port.isdigit() and "://" not in addr:   # the head's host:port (GCS)
        # ray.init retries an address where nothing answers for as long as it runs,
        # holding the stage's locks: ask once, with a timeout
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
        except OSError as e:
            raise StageError(f"cannot connect to Ray at {addr}: nothing answers there ({e}); "
                             "start the head (ray start --head) or fix --ray-address") from None
    return addr


def build_executor(step: ShardTask, tasks: int, args: argparse.Namespace, logging_dir: Path,
                   name: str, inline: bool = False):
    kind = getattr(args, "executor", "local")
    workers = max(1, min(int(getattr(args, "workers", 1) or 1), tasks))
    if kind == "local" and tasks > 1:   # the stage's one pool, whatever this phase's size
        workers = max(1, int(getattr(args, "workers", 1) or 1))
    if inline and kind == "local":
        workers = 1  # datatrove runs the tasks one by one in this process: no pool to start
    verbose = getattr(args, "verbose", False)
    if kind == "local":
        cls = _local_executor_cls()
        ex = cls(pipeline=[step], tasks=tasks, workers=workers, logging_dir=str(logging_dir),
                 skip_completed=True)
        ex.verbose = verbose
        return ex
    if kind == "ray":
        try:
            import ray
            import_datatrove_io()
            from datatrove.executor.ray import RayPipelineExecutor
        except ImportError as e:
            raise StageError(f"{NO_RAY} ({e})") from None
        if not ray.is_initialized():
            addr = check_executor(args)
            try:
                ray.init(address=addr, log_to_driver=verbose,
                         logging_level="INFO" if verbose else "WARNING",
                         runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(step.sys_path)}})
            except Exception as e:  # ray raises many types for an unreachable cluster
                raise StageError(f"cannot connect to Ray at {addr}: {str(e).splitlines()[0]}") from None
        return RayPipelineExecutor(pipeline=[step], tasks=tasks, workers=workers,
                                   logging_dir=str(logging_dir), skip_completed=True,
                                   cpus_per_task=1)
    if kind == "slurm":
        import_datatrove_io()
        from datatrove.executor import SlurmPipelineExecutor
        check_executor(args)
        activate = Path(sys.prefix) / "bin" / "activate"
        env = [f"source {activate}"] if activate.exists() else []
        env += [f"export PYTHONPATH={os.pathsep.join(step.sys_path)}${{PYTHONPATH:+:$PYTHONPATH}}",
                f"cd {step.cwd}"]
        return SlurmPipelineExecutor(
            pipeline=[step], tasks=tasks, workers=workers, logging_dir=str(logging_dir.resolve()),
            partition=args.slurm_partition, time=args.slurm_time, cpus_per_task=args.slurm_cpus,
            job_name=args.slurm_job_name or name, skip_completed=True, mail_type="NONE",
            env_command=" && ".join(env),
        )
    raise StageError(f"unknown executor {kind!r}")


def run_tasks(fn: Callable, tasks: int, args: argparse.Namespace, logging_dir: Path,
              name: str, progress: bool = True, total_docs: int = 0, total_bytes: int = 0,
              inline: bool = False, **kwargs) -> dict:
    """Run fn for ranks 0..tasks-1 through the chosen executor; skip tasks already done.

    Returns the phase's resources (pipeline.progress.phase_resources): task CPU seconds,
    core use and the largest worker's peak RSS. total_docs / total_bytes size the
    progress bar. inline: the phase is too small to pay for a worker pool (a second or
    so to start); on the local executor its tasks then run in this process, one after
    another (run_here; so do a phase of one task and --workers 1). Ray and Slurm are
    unchanged. The tasks and their output are the same whichever runs them."""
    if tasks <= 0:
        return {"tasks": 0}
    sys_path = [str(Path(__file__).resolve().parent.parent)]
    logging_dir = Path(logging_dir)
    kind = getattr(args, "executor", "local")
    step = ShardTask(fn_ref(fn), kwargs, name, sys_path, os.getcwd(),
                     progress_dir=str(logging_dir.resolve()),
                     driver_pid=os.getpid() if kind == "local" else None)
    here = kind == "local" and (inline or tasks == 1 or int(getattr(args, "workers", 1) or 1) == 1)
    if not here:
        _quiet(getattr(args, "verbose", False))
        if kind == "local":
            _preload_in_forkserver(step.ref.partition(":")[0])
        ex = build_executor(step, tasks, args, logging_dir, name, inline)
    t0 = time.time()
    with prog.ProgressBar(logging_dir, name, total_bytes, total_docs,
                          enabled=None if progress else False):
        try:
            if here:
                run_here(step, tasks, logging_dir)
            else:
                ex.run()
        except FileNotFoundError as e:   # sbatch (or scancel) gone since the check
            raise StageError(f"{name}: {e.filename or e} not found: {e.strerror}") from None
        except subprocess.CalledProcessError as e:  # sbatch refused the job
            raise StageError(f"{name}: {' '.join(map(str, e.cmd))} failed with exit {e.returncode}"
                             f"{': ' + e.output.decode(errors='replace').strip() if e.output else ''}") from None
        if kind == "slurm":
            _wait_for_slurm(ex, logging_dir, tasks, name)
    done = _completed(logging_dir)
    if done < tasks:
        raise StageError(f"{name}: only {done} of {tasks} tasks finished; "
                         f"see {logging_dir}/logs and rerun to resume")
    workers = 1 if inline and kind == "local" else int(getattr(args, "workers", 1) or 1)
    return prog.phase_resources(logging_dir, tasks, workers, time.time() - t0, since=t0)


def run_here(step: ShardTask, tasks: int, logging_dir: Path) -> None:
    """The tasks of a phase one after another in this process, as datatrove's local
    executor runs them with one worker, and with its completion markers (so a killed run
    resumes the same way), but without importing datatrove: for one task, or a phase
    too small for the pool, that import (its I/O layer pulls in huggingface_hub's file
    system, about 0.4 s) would cost more than the work."""
    done = logging_dir / "completions"
    done.mkdir(parents=True, exist_ok=True)
    for rank in range(tasks):
        marker = done / f"{rank:05d}"
        if marker.exists():
            continue
        step(None, rank=rank, world_size=tasks)
        marker.touch()


def _completed(logging_dir: Path) -> int:
    comp = Path(logging_dir) / "completions"
    return len(list(comp.iterdir())) if comp.exists() else 0


def _wait_for_slurm(ex, logging_dir: Path, tasks: int, name: str, poll: float = 10.0) -> None:
    """sbatch returns at once: wait until every task has marked itself complete, or the
    job has left the queue (then the missing tasks failed)."""
    job = getattr(ex, "job_id", None)
    while _completed(logging_dir) < tasks:
        if job in (None, -1):
            return
        try:
            q = subprocess.run(["squeue", "-h", "-j", str(job)], capture_output=True, text=True)
            queued = bool(q.stdout.strip())
        except FileNotFoundError:
            queued = False
        if not queued and _completed(logging_dir) < tasks:
            return  # the caller reports the missing tasks
        time.sleep(poll)


"""Progress and resources of a stage's tasks, added up across tasks, processes and machines.

Each task writes a small JSON record, `<logging_dir>/progress/<rank>.json`, at most
twice a second and once when it ends: documents and text bytes done so far, CPU seconds,
peak RSS. The files live in the stage's staging folder, so they add up the same way on
the local executor, on Ray and on Slurm (shared storage). The driver's ProgressBar sums
them into one bar in MB, with documents, rates and an ETA; after the phase,
`phase_resources` turns the final records into the phase's core use and the largest
worker's memory, which go into the stage's manifest.

    prog = task_progress()        # inside a task: the record of the task being run
    prog.add(docs=len(batch), nbytes=batch_bytes)
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

PROGRESS_DIR = "progress"
WRITE_EVERY = 0.5  # seconds between a task's progress records


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB.

    On Linux from VmHWM, the high-water mark of this process's own memory: ru_maxrss
    would carry over the peak of whatever process started this one (it survives exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kb / 1024 if sys.platform != "darwin" else kb / 2**20, 1)


def cpu_seconds() -> float:
    """CPU time of this process so far (all its threads), user + system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return round(r.ru_utime + r.ru_stime, 3)


def current_rss_mb() -> float:
    """This process's resident memory now, in MB (Linux; else the peak)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def available_memory() -> int | None:
    """Bytes of memory a new allocation can have now without swapping: MemAvailable on
    Linux, else the machine's physical memory; None when neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


DRIVER_PID = "DATAPREP_DRIVER_PID"   # set by the stage: the process whose peak is its own


def reset_peak() -> None:
    """In a worker, at a task's start: the high-water mark back to the memory held now
    (Linux), so the task's record gives its own peak, not the largest of every task the
    worker ran before (whose freed memory the allocator may keep). Never in the driver,
    whose peak the manifest reports (a task run there inline leaves it as it is)."""
    if str(os.getpid()) == os.environ.get(DRIVER_PID):
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class TaskProgress:
    """The progress record of one task, written atomically into its phase's folder."""

    def __init__(self, folder: str | os.PathLike | None, rank: int):
        if folder:
            reset_peak()
        self.path = Path(folder) / PROGRESS_DIR / f"{rank:05d}.json" if folder else None
        self.rank = rank
        self.docs = 0
        self.bytes = 0
        self._cpu0 = time.process_time()
        self._t0 = time.time()
        self._last = 0.0
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, docs: int = 0, nbytes: int = 0) -> None:
        self.docs += int(docs)
        self.bytes += int(nbytes)
        now = time.time()
        if now - self._last >= WRITE_EVERY:
            self._last = now
            self._write(done=False)

    def finish(self) -> None:
        self._write(done=True)

    def record(self, done: bool) -> dict:
        return {"rank": self.rank, "docs": self.docs, "bytes": self.bytes, "done": done,
                "cpu_s": round(time.process_time() - self._cpu0, 3),
                "wall_s": round(time.time() - self._t0, 3), "peak_rss_mb": peak_rss_mb(),
                "pid": os.getpid(), "at": round(time.time(), 3)}

    def _write(self, done: bool) -> None:
        if not self.path:
            return
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.record(done)))
        os.replace(tmp, self.path)


_CURRENT: TaskProgress | None = None


def task_progress() -> TaskProgress:
    """The record of the task this process is running (a throwaway one outside a task)."""
    return _CURRENT if _CURRENT is not None else TaskProgress(None, -1)


def start_task(folder: str | os.PathLike | None, rank: int) -> TaskProgress:
    global _CURRENT
    _CURRENT = TaskProgress(folder, rank)
    return _CURRENT


def end_task() -> None:
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.finish()
    _CURRENT = None


def read_records(folder: str | os.PathLike) -> dict[int, dict]:
    """rank -> the latest progress record of every task that has written one."""
    d = Path(folder) / PROGRESS_DIR
    out = {}
    if not d.exists():
        return out
    for p in d.glob("*.json"):
        try:
            r = json.loads(p.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: the next read gets it
        out[int(r["rank"])] = r
    return out


def show_progress() -> bool:
    """Bars only for a person watching: stdout and stderr both terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


class ProgressBar:
    """One bar for a phase: MB done of the total, with documents, rates and an ETA.

    A thread re-reads the tasks' records twice a second; a finished task's record is not
    read again. Quiet (no thread at all) unless a person is watching.
    """

    def __init__(self, folder: str | os.PathLike, name: str, total_bytes: int,
                 total_docs: int, enabled: bool | None = None):
        self.folder, self.name = Path(folder), name
        self.total_bytes, self.total_docs = int(total_bytes), int(total_docs)
        self.enabled = show_progress() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done: dict[int, dict] = {}

    def __enter__(self) -> "ProgressBar":
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def totals(self) -> tuple[int, int]:
        """(documents, bytes) done over all tasks so far."""
        recs = read_records(self.folder)
        return (sum(r["docs"] for r in recs.values()), sum(r["bytes"] for r in recs.values()))

    def _run(self) -> None:
        from tqdm import tqdm

        t0 = time.time()
        with tqdm(total=self.total_bytes, desc=self.name, unit="B", unit_scale=True,
                  unit_divisor=1000, leave=False, dynamic_ncols=True) as bar:
            while True:
                stop = self._stop.wait(WRITE_EVERY)
                docs, nbytes = self.totals()
                bar.update(max(0, nbytes - bar.n))
                rate = docs / max(time.time() - t0, 1e-9)
                bar.set_postfix_str(f"{docs:,}/{self.total_docs:,} docs, {rate:,.0f} docs/s",
                                    refresh=True)
                if stop:
                    return


def phase_resources(folder: str | os.PathLike, tasks: int, workers: int,
                    wall_s: float, since: float | None = None) -> dict:
    """What a phase's tasks used: CPU seconds, core use = CPU / (workers x wall), and the
    largest worker's peak RSS. Tasks skipped on a resume left their old records, which
    count in the CPU: the phase's work is the same; but the core use is this run's, over
    the tasks that ran since `since` (the phase's start), and None when none did (it came
    out in millions of percent on a resume whose tasks had all run before)."""
    recs = read_records(folder)
    cpu = sum(r["cpu_s"] for r in recs.values())
    now = [r for r in recs.values() if since is None or r.get("at", since) >= since]
    cpu_now = sum(r["cpu_s"] for r in now)
    elsewhere = sum(r["cpu_s"] for r in recs.values() if r.get("pid") != os.getpid())
    workers = max(1, min(workers, tasks))
    return {
        "tasks": tasks, "workers": workers, "wall_s": round(wall_s, 3),
        "task_cpu_s": round(cpu, 3),
        # CPU of tasks run by other processes (not in the driver's own CPU time)
        "worker_cpu_s": round(elsewhere, 3),
        "core_use": round(cpu_now / (workers * wall_s), 3) if wall_s > 0 and now else None,
        "max_worker_rss_mb": max((r["peak_rss_mb"] for r in recs.values()), default=None),
        "docs": sum(r["docs"] for r in recs.values()),
        "bytes": sum(r["bytes"] for r in recs.values()),
    }

"""Sweeps: what several values of a threshold would do, without writing any output.

    python clean.py --sweep min_chars=100,200,400
    python dedup_minhash.py --sweep threshold=0.7,0.8,0.9

A sweep judges every value on the same documents, from the measurements a run kept
(pipeline.kept_store), measuring only what was never measured, and prints a table per
threshold with the documents whose fate changes between neighbouring values. It writes
only report/sweep.{json,md} beside the output: the output, its manifest and the stages
below stay as they are (it holds the output's lock meanwhile, as a run does). What it
had to measure goes to a hidden side store beside the output (`.cleaned.signals`,
`.dedup.signatures`), where the next run or sweep finds it; the next run that keeps its
measurements merges it and removes it.

This module is the part every sweep shares: the flag's syntax, the work folder, saving
the report, keeping the side store, and carrying the report across reruns. What is
judged, and how the tables read, is the stage's.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Callable

from .errors import StageError
from .executors import run_tasks
from .kept_store import replace_dir, side_store
from .tables import save_report
from .task_results import load_task_results


def parse_sweep(spec: str, sweepable: dict[str, type], check: Callable | None = None
                ) -> tuple[str, list]:
    """'min_chars=100,200,400' -> ("min_chars", [100, 200, 400]), sorted and unique.
    sweepable: name -> type of its values (str: sets separated by ';', each a comma list,
    as 'languages=en;en,zh'). check(value) raises ValueError for a value out of range."""
    name, sep, values = spec.partition("=")
    name = name.strip().replace("-", "_").removeprefix("__")
    if not sep or name not in sweepable:
        raise StageError(f"--sweep {spec!r}: expected NAME=V1,V2,... with NAME one of "
                         f"{', '.join(sweepable)}")
    kind = sweepable[name]
    raw = values.split(";") if kind is str else values.split(",")
    out = []
    for v in (x.strip() for x in raw):
        if not v:
            continue
        try:
            value = (tuple(x.strip() for x in v.split(",") if x.strip()) if kind is str
                     else kind(v))
            if check:
                check(name, value)
        except ValueError as e:
            why = str(e) if str(e) and "invalid literal" not in str(e) \
                and "could not convert" not in str(e) else f"is not a {kind.__name__}"
            raise StageError(f"--sweep {spec!r}: {v!r} {why}") from None
        out.append(value)
    if not out:
        raise StageError(f"--sweep {spec!r}: no values")
    if kind is not str:
        out = sorted(set(out))
    return name, out


class SweepRun:
    """A sweep of a stage's run (pipeline.stage.Run): the same input, units and flags, with
    a work folder (`.cleaned.sweep.partial` beside the output) in place of the staging
    folder, so the stage's phases run unchanged; and the end of it: the report saved,
    the side store kept."""

    def __init__(self, run, kind: str):
        self.run, self.kind = run, kind
        self.args, self.units, self.offsets = run.args, run.units, run.offsets
        self.output = Path(run.output)
        self.staging = self.output.parent / f".{self.output.name}.sweep.partial"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True)
        self.kept = self.staging / "_kept"     # what the sweep measured, for the side store
        self.t0 = time.time()

    total_docs = property(lambda self: self.run.total_docs)
    total_bytes = property(lambda self: self.run.total_bytes)
    unit_dicts = property(lambda self: self.run.unit_dicts)

    def phase(self, name: str):
        return contextlib.nullcontext()

    def parallel(self, phase: str, fn: Callable, tasks: int | None = None,
                 inline: bool = False, sized: bool = True, **kwargs) -> dict:
        n = len(self.units) if tasks is None else tasks
        size = {"total_docs": self.total_docs, "total_bytes": self.total_bytes} if sized else {}
        return run_tasks(fn, n, self.args, self.staging / "_logs" / phase, phase,
                         inline=inline, **size, **kwargs)

    def results(self, phase: str, tasks: int | None = None) -> list[dict]:
        return load_task_results(self.staging, phase, len(self.units) if tasks is None else tasks)

    @property
    def seconds(self) -> float:
        return round(time.time() - self.t0, 3)

    def finish(self, data: dict, markdown: str, keep_measured: bool) -> str:
        """Save report/sweep.{json,md} beside the output; when the sweep measured anything
        not kept already, its store (self.kept) becomes the side store; remove the work
        folder. Returns the line to print last."""
        save_report(self.output / "report", "sweep", data, markdown)
        if keep_measured:
            replace_dir(self.kept, side_store(self.output, self.kind))
        shutil.rmtree(self.staging, ignore_errors=True)
        return (f"wrote {self.output}/report/sweep.md and sweep.json (the output and its "
                "manifest are unchanged)")


def carry_sweep_reports(output: Path, staging: Path) -> None:
    """A sweep's report describes the input, not the output: a run keeps it."""
    for f in (Path(output) / "report").glob("sweep.*"):
        (staging / "report").mkdir(exist_ok=True)
        shutil.copy2(f, staging / "report" / f.name)


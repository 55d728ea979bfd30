"""Task results: each task writes its counts as a small JSON file in the staging folder,
atomically; the driver reads them all, in rank order, after the phase."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import StageError
from .manifest import write_json

RESULTS_DIR = "_results"  # in the staging folder; StageRun.commit does not publish it


def save_task_result(folder: str | os.PathLike, phase: str, rank: int, result: dict) -> None:
    """A task's counts, written atomically, for the driver to merge after the phase."""
    d = Path(folder) / RESULTS_DIR / phase
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / f"{rank:05d}.json", result, indent=None)


def load_task_results(folder: str | os.PathLike, phase: str, tasks: int) -> list[dict]:
    """The results of tasks 0..tasks-1 of a phase, in rank order."""
    d = Path(folder) / RESULTS_DIR / phase
    out = []
    for r in range(tasks):
        p = d / f"{r:05d}.json"
        if not p.exists():
            raise StageError(f"{phase}: task {r} left no result in {d}; rerun to resume")
        out.append(json.loads(p.read_text(encoding="utf-8")))
    return out

"""The last phase of both dedup stages: copy each unit's rows that survive into its output
shard, given the sorted global indices of the rows to drop.

    records = filter_phase(run, "dup.npy", pick={"id": rows, "text": shown})

One task per unit. A rerun whose rows do not change links the previous output's file
instead of rewriting it (pipeline.units.filter_unit), and when no unit changes, the
phase runs in this process rather than in the worker pool. `pick` asks the tasks, which
read every row anyway, for the values of a few rows the report shows (`Picked`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from algorithms.arrays import combine, from_numpy
from .progress import task_progress
from .task_results import save_task_result
from .units import Unit, fetch_column, filter_recipe, filter_unit, previous_files
from .work_files import WORK, load_arrow, save_arrow, save_npy

def keep_mask(dup: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Which of the documents lo..hi-1 (global indices) are not in the sorted array dup."""
    a, b = np.searchsorted(dup, [lo, hi])
    keep = np.ones(hi - lo, dtype=bool)
    keep[np.asarray(dup[a:b]) - lo] = False
    return keep


def drop_rows(work: Path, drop: str, rank: int) -> np.ndarray:
    """The sorted global rows unit `rank` drops: its slice of the array _work/<drop>, or,
    when <drop> is a folder, the unit's own file in it (RANK.npy, the unit's rows only)."""
    path = work / drop
    if path.is_dir():
        return np.load(path / f"{rank:05d}.npy")
    return np.load(path, mmap_mode="r")


def filter_task(rank: int, world_size: int, units: list[dict], offsets: list[int],
                staging: str, drop: str = "dup.npy", input_fingerprint: str | None = None,
                previous: dict | None = None, pick: list[str] = ()) -> None:
    """Copy unit `rank` without the rows whose global index is in the sorted array
    _work/<drop> (or, <drop> a folder, in its file for this unit: drop_rows). A file of
    the previous output with the same recipe is reused (pipeline.units.filter_unit).

    For each column of `pick`, the values at the global rows _work/pick_<column>.npy that
    fall in this unit are saved for the report (Picked): the task reads them anyway."""
    work = Path(staging) / WORK
    dup = drop_rows(work, drop, rank)
    lo, hi = offsets[rank], offsets[rank + 1]
    unit = Unit(**units[rank])
    rows = {}
    for col in pick:
        want = np.load(work / f"pick_{col}.npy", mmap_mode="r")
        a, b = np.searchsorted(want, [lo, hi])
        rows[col] = np.asarray(want[a:b], np.int64) - lo
    rec = filter_unit(unit, Path(staging) / unit.name, keep_mask(dup, lo, hi), input_fingerprint,
                      (previous or {}).get(unit.name), pick=rows if pick else None)
    for col, values in rec.pop("picked", {}).items():
        save_arrow(work / "picked" / f"{col}-{rank:05d}.arrow", pa.table({col: values}))
    task_progress().add(hi - lo, rec["text_bytes"])
    save_task_result(staging, "filter", rank, rec)


def filter_phase(run, drop: str, pick: dict[str, np.ndarray] | None = None) -> list[dict]:
    """One task per unit of `run` (a pipeline.stage.Run), copying its kept rows (drop:
    the work file, or folder of one file a unit, of the rows to drop: drop_rows); returns
    the output's file records, in unit order.

    A rerun that changes no unit's rows (the previous output's recipes all match) only
    checks and links the previous files, in this process rather than in a worker pool.
    pick ({column: global rows}): the tasks also keep those rows' values, for the report
    to read with Picked instead of reading the input again."""
    staging, units, offsets = run.staging, run.units, run.offsets
    for col, rows in (pick or {}).items():
        save_npy(staging / WORK / f"pick_{col}.npy", np.unique(np.asarray(rows, np.int64)))
    previous = previous_files(run.output, run.input_fingerprint)
    unchanged = bool(previous) and all(
        (previous.get(u.name) or {}).get("recipe") == filter_recipe(
            u, keep_mask(drop_rows(staging / WORK, drop, i), offsets[i], offsets[i + 1]),
            run.input_fingerprint)
        for i, u in enumerate(units))
    run.parallel("filter", filter_task, inline=unchanged,
                 units=run.unit_dicts(), offsets=[int(x) for x in offsets],
                 staging=str(staging), drop=drop, input_fingerprint=run.input_fingerprint,
                 previous=previous, pick=[] if unchanged else sorted(pick or {}))
    for col in pick or {}:   # one file per column, in the order of its rows
        parts = staging / WORK / "picked"
        if unchanged or not units:   # no task read the input: read those rows here
            values = fetch_column(units, offsets, np.load(staging / WORK / f"pick_{col}.npy"), col)
        else:
            values = pa.concat_tables([load_arrow(parts / f"{col}-{r:05d}.arrow")
                                       for r in range(len(units))]).column(col)
        save_arrow(parts / f"{col}.arrow", pa.table({col: values}))
    return run.results("filter")


class Picked:
    """The values of `column` that filter_phase picked, looked up by global row."""

    def __init__(self, staging: Path, column: str):
        work = Path(staging) / WORK
        self.rows = np.load(work / f"pick_{column}.npy")
        self.values = load_arrow(work / "picked" / f"{column}.arrow").column(column)

    def at(self, gidx) -> pa.Array:
        """The values at global rows `gidx` (any order, repeats allowed; each one picked)."""
        gidx = np.asarray(gidx, np.int64)
        pos = np.searchsorted(self.rows, gidx)
        if len(gidx) and (pos.max() >= len(self.rows) or (self.rows[pos] != gidx).any()):
            raise ValueError("rows asked for that the filter tasks did not pick")
        return combine(self.values.take(from_numpy(pos, pa.int64())))

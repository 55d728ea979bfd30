"""The edge files of dedup_minhash's cluster rounds (--cluster tasks), under the staging
folder's work directory: one folder a step, one file a task, its edges sorted by the
partition that reads them, with the bounds of each partition's slice beside it. A task of
the next step reads its slice of every file of the step before (memory-mapped): it holds
one partition, never the graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from algorithms.components import by_partition
from pipeline.work_files import save_npy


def write_partitioned(folder: Path, rank: int, edges: np.ndarray, parts: int) -> None:
    """Task `rank`'s edges, by the partition of their first node."""
    ordered, bounds = by_partition(edges, parts)
    save_npy(folder / f"{rank:05d}.bounds.npy", bounds)
    save_npy(folder / f"{rank:05d}.npy", ordered)


def read_partition(folder: Path, writers: int, rank: int) -> np.ndarray:
    """Partition `rank`'s slice of the files the `writers` tasks of a step wrote."""
    out = [np.zeros((0, 2), np.int64)]
    for w in range(writers):
        b = np.load(folder / f"{w:05d}.bounds.npy")
        if b[rank + 1] > b[rank]:
            out.append(np.asarray(np.load(folder / f"{w:05d}.npy", mmap_mode="r")[b[rank]:b[rank + 1]]))
    return np.concatenate(out)

"""Work files: what a stage's tasks hand to its driver (or to its next phase) inside the
staging folder, under _work/. Each is written under a temporary name and renamed, so a
killed task never leaves a half file that a resumed run would trust. The staging
folder's _work/ is never published (pipeline.staging)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

WORK = "_work"


def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """np.save via a temporary name, so a killed task never leaves a half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


def save_arrow(path: Path, table: pa.Table) -> None:
    """A small Arrow file (uncompressed, memory-mappable), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def load_arrow(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()

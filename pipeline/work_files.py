"""Work files: what a stage's tasks hand to its driver (or to its next phase) inside the
staging folder, under _work/. Each is written under a temporary name and renamed, so a
killed task never leaves a half file that a resumed run would trust. The staging
folder's _work/ is never published (pipeline.staging)."""

from __future__ import annotations

import contextlib
import errno
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from .disk import naming

WORK = "_work"


def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """np.save via a temporary name, so a killed task never leaves a half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


def mapped_npy(path: str | os.PathLike, dtype, shape: tuple[int, ...]) -> np.memmap:
    """A new .npy file at `path` (replaced if it exists) of `shape` and `dtype`, mapped
    for writing, with its blocks reserved before it is mapped (posix_fallocate).

    A write through a map to a page whose block was never allocated (a file only
    extended, as np.lib.format.open_memmap(mode="w+") leaves it) kills the process with
    SIGBUS when the file system has no block left. The reservation raises OSError ENOSPC
    (naming `path`, which is removed) at once instead, and the stage prints its one line
    (pipeline.disk). On a file system that cannot reserve (EOPNOTSUPP, EINVAL) the file is
    left sparse, as before. The header is the one np.save writes, so the bytes are the same."""
    path = Path(path)
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(n) for n in shape)}
    try:
        with naming(path), open(path, "wb") as f:
            try:
                np.lib.format.write_array_header_1_0(f, header)
            except ValueError:   # a header over 64 KB: format 2.0, as np.save would choose
                f.seek(0)
                f.truncate()
                np.lib.format.write_array_header_2_0(f, header)
            f.flush()
            size = f.tell() + dtype.itemsize * math.prod(header["shape"])
            try:
                os.posix_fallocate(f.fileno(), 0, size)
            except AttributeError:   # no posix_fallocate on this platform
                f.truncate(size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS):
                    raise
                f.truncate(size)
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        raise
    return np.lib.format.open_memmap(path, mode="r+")


def save_arrow(path: Path, table: pa.Table) -> None:
    """A small Arrow file (uncompressed, memory-mappable), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def load_arrow(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()

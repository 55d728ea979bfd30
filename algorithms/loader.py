"""Reading train.bin / val.bin for training (tutorial 5.2): random windows, y = x shifted by one.

    from algorithms.loader import get_batch
    x, y = get_batch("train", batch_size=8, seq_len=1024)   # int64 arrays, shape (8, 1024)

The files are flat uint16 token streams, read through np.memmap: the OS pages in only
the windows a batch touches, so a file larger than RAM reads as fast as a small one.
Windows start anywhere and may cross a document boundary (5.3): the EOS between
documents tells the model where one ends.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DATA = Path("data")   # where pack_parallel.py writes train.bin and val.bin
DTYPE = np.uint16
SPLITS = ("train", "val")


def bin_path(split: str, data_dir: str | os.PathLike = DATA) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: use one of {', '.join(SPLITS)}")
    return Path(data_dir) / f"{split}.bin"


def open_bin(split: str, data_dir: str | os.PathLike = DATA) -> np.memmap:
    """The split's token stream as a read-only memmap (nothing is read until indexed)."""
    p = bin_path(split, data_dir)
    if not p.exists():
        raise ValueError(f"{p} not found; run pack_parallel.py first")
    if p.stat().st_size % 2:
        raise ValueError(f"{p}: odd size {p.stat().st_size}; not a uint16 token file, "
                         "rerun pack_parallel.py")
    return np.memmap(p, dtype=DTYPE, mode="r")


def get_batch(split: str, batch_size: int, seq_len: int,
              data_dir: str | os.PathLike = DATA,
              rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """batch_size random windows of seq_len tokens: x, and y = the next token for each x.

    Returns two int64 arrays of shape (batch_size, seq_len), as nanoGPT feeds them to
    the model (torch.from_numpy(x) gives the tensor). The memmap is opened per call,
    as nanoGPT does, so a long training loop does not keep growing resident pages.
    """
    if batch_size <= 0 or seq_len <= 0:
        raise ValueError(f"batch_size and seq_len must be positive (got {batch_size}, {seq_len})")
    data = open_bin(split, data_dir)
    if len(data) < seq_len + 1:
        raise ValueError(f"{bin_path(split, data_dir)} holds {len(data)} tokens: too few for "
                         f"seq_len {seq_len} (need {seq_len + 1})")
    rng = rng if rng is not None else np.random.default_rng()
    # a start at len - seq_len - 1 is the last one whose y still fits
    ix = rng.integers(0, len(data) - seq_len, size=batch_size)
    x = np.stack([np.asarray(data[i:i + seq_len], dtype=np.int64) for i in ix])
    y = np.stack([np.asarray(data[i + 1:i + 1 + seq_len], dtype=np.int64) for i in ix])
    return x, y


# --------------------------------------------------------------------------------------
# pack_report/val_ids.txt: the ids of the documents in val.bin, one a line.
# --------------------------------------------------------------------------------------

def write_val_ids(path: str | os.PathLike, ids: list[str]) -> None:
    """Write the val ids, each line ending in "\n", via a temporary name. An id that
    holds a newline is refused, naming it: read back, it would be two ids, neither in val."""
    bad = next((i for i in ids if "\n" in i), None)
    if bad is not None:
        raise ValueError(f"the id {bad!r}, chosen for val, holds a newline: pack_report/"
                         "val_ids.txt lists one id a line; give the documents ids without one")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes("".join(f"{i}\n" for i in ids).encode("utf-8"))
    os.replace(tmp, path)


def read_val_ids(path: str | os.PathLike) -> set[str]:
    """The val ids as written: lines end in "\n" only (an id may hold a carriage return,
    U+2028 or other breaks that str.splitlines would cut at, and read_text turns "\r"
    into "\n")."""
    text = Path(path).read_bytes().decode("utf-8")
    return set(text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else [])

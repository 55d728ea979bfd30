"""Per-code-point tables built from Python's own str methods (isalnum, isspace, lower),
cached on disk: building one walks all 1,114,112 code points in Python (0.1-0.3 s, paid
by every process that measures text); loading it takes a few milliseconds.

A table depends only on the Python version's Unicode data, which names the file; it is
written next to the compiled bytecode (__pycache__), atomically, and rebuilt when
missing, unreadable or not writable.
"""

from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path
from typing import Callable

import numpy as np


def cached_table(name: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    key = f"{name}-py{sys.version_info[0]}{sys.version_info[1]}-unicode{unicodedata.unidata_version}"
    path = Path(__file__).resolve().parent / "__pycache__" / f"{key}.npy"
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError):   # missing, unreadable, or cut short
        pass
    table = build()
    try:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, table)
        os.replace(tmp, path)
    except OSError:
        pass
    return table

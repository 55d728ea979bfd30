#!/usr/bin/env python3
"""Compile the numba kernels once, two chains of stages side by side, before any real run.

    python scripts/compile_kernels.py            # what `make install` runs after pip

The kernels are cached on disk beside their modules (algorithms/jit.py), and a cached
kernel loads in milliseconds. Without this step the first run of each stage compiles
what it uses in every one of its workers at once: each worker compiles the same kernels
(a 50 MB run took 116 CPU s instead of 20, docs/benchmarks.md). Here the stages run on
the bundled sample with --workers 1, in two independent chains in two processes, so the
kernels each chain needs are compiled once each, on two cores:

  1. clean.py with the tutorial's rules and every rule pack, dedup_exact.py, dedup_minhash.py
  2. train_tokenizer.py and pack_parallel.py, both reading download_data.py's output

They are the kernels, with the argument types, that a real run loads. Flags that select
other code (--trainer hf, --encoder, a sweep) compile what they add on their first use.
The outputs go to a temporary folder, removed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from algorithms.cleaning import QUALITY_PACKS  # noqa: E402

PACKS = ",".join(["tutorial", *QUALITY_PACKS])   # the five rules and every pack


def chains(d: Path) -> list[list[list[str]]]:
    """The two chains of commands (script, arguments), each run in order."""
    one = ["--workers", "1"]
    return [
        [["clean.py", "--input", d / "raw", "--output", d / "cleaned", "--rules", PACKS, *one],
         ["dedup_exact.py", "--input", d / "cleaned", "--output", d / "dedup_exact", *one],
         ["dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / "dedup", *one]],
        [["train_tokenizer.py", "--input", d / "raw", "--output", d / "tokenizer",
          "--vocab-size", "2000", *one],
         ["pack_parallel.py", "--input", d / "raw", "--output", d / "packed",
          "--tokenizer", d / "tokenizer" / "tokenizer.json", *one]],
    ]


def run(cmd: list) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cp = subprocess.run([sys.executable, str(ROOT / cmd[0]), *map(str, cmd[1:])], cwd=ROOT,
                        env=env, capture_output=True, text=True)
    if cp.returncode != 0:
        tail = (cp.stderr.strip() or cp.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"compile_kernels: {cmd[0]} exited {cp.returncode}: {tail[0]}")


def run_chain(chain: list[list]) -> None:
    for cmd in chain:
        run(cmd)


def main() -> None:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="compile-kernels-") as tmp:
        d = Path(tmp) / "data"
        run(["download_data.py", "--dataset", "sample", "--output", d / "raw", "--workers", "1"])
        todo = chains(d)
        with ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as pool:
            for f in [pool.submit(run_chain, c) for c in todo]:
                f.result()
    print(f"compiled the kernels (cached beside their modules) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

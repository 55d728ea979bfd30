"""Benchmark: what a stage costs when it has (almost) nothing to do.

    python bench/bench_startup.py                 # every stage, 5 runs each, medians

Every stage runs, with the command a user types, on a corpus of ONE short document
(download, clean, both dedups, the tokenizer with a tiny vocabulary, pack): what is left
is the fixed cost of a run (three documents: pack needs two to split off a
validation document, and one is held out by the tokenizer) -- the interpreter, the imports, the worker pool, the locks,
the manifests, the report. A fresh output each run (no "up to date" shortcut): the same
work a first run does. Wall seconds and CPU seconds (the stage and every process it
starts), medians of --runs runs after one warm-up (numba's on-disk cache filled).

Then the import floor under all of it: a fresh interpreter importing what the stages
share, layer on layer (numpy and pyarrow, datatrove's executor, numba with its compiler
context), and apart, the Hugging Face file system that datatrove's io module imports
(which the stages skip: pipeline/datatrove_import.py).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cpu_model, stage_env  # noqa: E402

DOCS = [
    "A short document, long enough to pass every cleaning rule of the tutorial: it has "
    "several sentences, no repeated lines, and plenty of letters to count. " * 3,
    "Another one, on another subject entirely: the weather was fine on the coast this "
    "week, with a light wind from the west and clear skies every evening. " * 3,
    "A third text about cooking rice: rinse it twice, use one and a half cups of water "
    "for each cup of rice, and let it rest ten minutes after the heat is off. " * 3,
]


def commands(d: Path, out: Path) -> list[tuple[str, list[str]]]:
    return [
        ("download_data", ["download_data.py", "--input", str(d / "one.parquet"),
                           "--output", str(out / "raw")]),
        ("clean", ["clean.py", "--input", str(d / "raw"), "--output", str(out / "cleaned")]),
        ("dedup_exact", ["dedup_exact.py", "--input", str(d / "cleaned"),
                         "--output", str(out / "dedup_exact")]),
        ("dedup_minhash", ["dedup_minhash.py", "--input", str(d / "dedup_exact"),
                           "--output", str(out / "dedup")]),
        ("train_tokenizer", ["train_tokenizer.py", "--input", str(d / "dedup"),
                             "--output", str(out / "tokenizer"), "--vocab-size", "300",
                             "--min-frequency", "0"]),
        ("pack_parallel", ["pack_parallel.py", "--input", str(d / "dedup"), "--tokenizer",
                           str(d / "tokenizer" / "tokenizer.json"), "--output", str(out / "pack"),
                           "--val-ratio", "0.5"]),
    ]


def timed(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process and all its children) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    cp = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cp.returncode:
        raise SystemExit(f"{args[0]} failed: {cp.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(runs: int = 5, workers: int = 2) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = stage_env()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(len(DOCS))], "text": DOCS}),
                       d / "one.parquet")
        for name, args in commands(d, d):        # the inputs, and numba's cache, once
            timed(args + ["--workers", str(workers)], env)
        for name, args in commands(d, d / "out"):
            got = []
            for _ in range(runs):
                shutil.rmtree(d / "out", ignore_errors=True)
                (d / "out").mkdir()
                if name == "pack_parallel":
                    (d / "out" / "pack").mkdir()
                got.append(timed(args + ["--workers", str(workers)], env))
            rows[name] = {"wall_s": round(statistics.median(g[0] for g in got), 3),
                          "cpu_s": round(statistics.median(g[1] for g in got), 3)}
    return {"cpu": cpu_model(), "workers": workers, "runs": runs, "stages": rows}


# What the stages import before any work, layer on layer: each line is a fresh interpreter
# that imports everything up to it (the floor under every stage's fixed cost). `pipeline`
# first, as every stage does: numpy's OpenBLAS then starts one thread (pipeline/__init__.py)
_BASE = "import pipeline, numpy, pyarrow, pyarrow.compute"
# as the stages import it: datatrove.io without the hub's client (pipeline/datatrove_import.py)
_DATATROVE = ("from pipeline.datatrove_import import import_datatrove_io; "
              "import_datatrove_io(); import datatrove.executor.local")
_NUMBA = ("from algorithms.jit import numba; from numba.core import registry; "
          "registry.cpu_target.target_context.refresh()")
IMPORT_LAYERS = [
    ("the interpreter", "pass"),
    ("+ numpy, pyarrow", _BASE),
    ("+ datatrove's local executor", f"{_BASE}; {_DATATROVE}"),
    ("+ numba and its compiler context", f"{_BASE}; {_DATATROVE}; {_NUMBA}"),
]
# what datatrove.io imports (HfFileSystem), used by no stage but download_data's hub code:
# the stages no longer pay it (pipeline/datatrove_import.py)
HUB_FS = ("numpy, pyarrow + huggingface_hub.hf_file_system",
          f"{_BASE}; import huggingface_hub.hf_file_system")


def import_floor(runs: int = 5) -> dict:
    """Median wall and CPU seconds of each IMPORT_LAYERS line (and of HUB_FS) in a fresh
    interpreter."""
    env = stage_env()
    out = {}
    for name, code in [*IMPORT_LAYERS, HUB_FS]:
        code += "; import gc; gc.freeze()"   # the stages' exit skips the last collection too
        timed(["-c", code], env)   # caches warm
        got = [timed(["-c", code], env) for _ in range(runs)]
        out[name] = {"wall_s": round(statistics.median(g[0] for g in got), 3),
                     "cpu_s": round(statistics.median(g[1] for g in got), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--imports", action="store_true",
                   help="only the import floor: what the common imports cost, layer on layer")
    a = p.parse_args(argv)
    if not a.imports:
        res = run(a.runs, a.workers)
        print(f"fixed cost of a run on a 3-document input ({res['cpu']}; --workers "
              f"{a.workers}, medians of {a.runs}):")
        for name, r in res["stages"].items():
            print(f"  {name:16s} {r['wall_s']:6.2f} s wall  {r['cpu_s']:6.2f} s CPU")
    print(f"the import floor (a fresh interpreter each, cumulative; {cpu_model()}; "
          f"medians of {a.runs}):")
    for name, r in import_floor(a.runs).items():
        print(f"  {name:50s} {r['wall_s']:6.2f} s wall  {r['cpu_s']:6.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())

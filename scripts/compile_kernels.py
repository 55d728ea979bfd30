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

and, after the first chain, the kernels a real corpus reaches and the sample does not
(exercise(): dedup_exact's kernel, MinHash's rare paths).

They are the kernels, with the argument types, that a real run loads. Flags that select
other code (--encoder, a sweep) compile what they add on their first use.
The outputs go to a temporary folder, removed at the end.

Then each module's kernels are built ahead of time (algorithms/jit.py), for the argument
types numba's cache recorded in those runs, with numba's pycc and the C compiler: a stage
whose kernels are all built never imports numba. Where that fails (no C compiler, say),
it says so and the stages compile their kernels just in time, as before.

    python scripts/compile_kernels.py --aot-only    # only the ahead-of-time builds
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
    # numba compiles (and caches) what the stages use: the ahead-of-time builds come after
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATAPREP_AOT": "0"}
    cp = subprocess.run([sys.executable, str(ROOT / cmd[0]), *map(str, cmd[1:])], cwd=ROOT,
                        env=env, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"compile_kernels: {cmd[0]} exited {cp.returncode}: {last_line(cp)}")


def last_line(cp: subprocess.CompletedProcess) -> str:
    """The last line a failed command printed (its error), or "(no output)"."""
    return ((cp.stderr.strip() or cp.stdout.strip()).splitlines()[-1:] or ["(no output)"])[0]


def run_chain(chain: list[list]) -> None:
    for cmd in chain:
        run(cmd)


def exercise() -> None:
    """The kernels a real corpus reaches and the sample's runs do not: dedup_exact's
    digests (below 64 MB of text the stage digests in Python), MinHash's paths for texts
    with a character only str.lower() lowercases and for texts longer than LONG_TEXT, the
    tokenizer sample's piece sampling, verify.py's band hashes, the decontaminate rule's
    n-gram count. Called through the same functions the stages call,
    so numba's cache records the same argument types (run with DATAPREP_AOT=0)."""
    import pyarrow as pa

    from algorithms import exact_dedup_fast
    from algorithms.minhash import MinHasher, band_hashes
    from algorithms.minhash_fast import LONG_TEXT
    from algorithms.packing_fast import sampled_pieces
    from algorithms.tokenizer_sample import PIECE_SAMPLE_BITS
    from algorithms.arrays import text_buffers

    texts = ["A plain  English\ttext, with spaces.", "ΣΑΣ ΣΟΦΟΣ and İstanbul", "中文 文本。",
             "", "long text " * (LONG_TEXT // 10 + 10)]
    col = pa.array(texts, pa.string())
    exact_dedup_fast.load()
    exact_dedup_fast.batch_digests(col)
    mh = MinHasher()
    mh.signatures_of_column(col)
    mh.signatures_and_lengths(texts)
    mh.signatures(texts, normalised=True)
    band_hashes(mh.signatures(texts), 16, 8)       # as verify.py recomputes a sample's bands
    sampled_pieces(*text_buffers(col), PIECE_SAMPLE_BITS)
    # clean.py's decontaminate rule and verify.py's item 11 (the sample runs neither)
    from algorithms import decontamination, decontamination_fast
    index = decontamination.build_index([("a plain english", "text with spaces")], 3)
    decontamination_fast.matched_ngrams(col, index, decontamination_fast.bitmap(index.hashes))


# --------------------------------------------------------------------------------------
# ahead of time
# --------------------------------------------------------------------------------------

def cached_signatures(module, name: str) -> list:
    """The argument types numba's cache index holds for kernel `name` of `module` (its file
    is named after the function and its first line). An entry left from an older source
    is harmless: build_aot compiles the current source for it, or skips it."""
    import pickle

    from algorithms import jit

    fn = getattr(module, name).py_func
    index = jit.AOT_DIR / (f"{Path(module.__file__).stem}.{fn.__qualname__}-"
                           f"{fn.__code__.co_firstlineno}."
                           f"{sys.implementation.cache_tag.replace('cpython-', 'py')}.nbi")
    sigs = []
    try:
        with open(index, "rb") as f:
            pickle.load(f)                         # numba's version
            _, overloads = pickle.loads(f.read())
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):
        return sigs
    for key in overloads:
        if key[0] not in sigs:
            sigs.append(key[0])
    return sigs


def build_aot(name: str) -> str:
    """Build module `name`'s kernels ahead of time: algorithms/__pycache__/aot_<name>*.so
    and its record aot_<name>.json, both replaced at once. Returns a line to print."""
    import importlib
    import json
    import warnings

    from algorithms import jit

    numba = jit.load_numba()
    import numba.pycc.compiler as pycc_compiler
    from numba.pycc import CC

    module = importlib.import_module(f"algorithms.{name}")
    jit.use_numba()
    ours = [k for k in jit._KERNELS if k.py_func.__module__ == module.__name__
            and k.options.get("inline") != "always"]
    exports: dict[str, list] = {}
    cc = CC(f"aot_{name}")
    n = 0
    for k in ours:
        disp = getattr(module, k.py_func.__name__)
        for sig in cached_signatures(module, k.py_func.__name__):
            key = [jit.type_key(t) for t in sig]
            if None in key:
                continue
            try:
                disp.compile(sig)                 # from the cache: gives the return type
            except Exception:                     # noqa: BLE001  (an entry of older code)
                continue
            export = f"{k.py_func.__name__}__{len(exports.get(k.py_func.__name__, []))}"
            cc.export(export, disp.overloads[tuple(sig)].signature)(k.py_func)
            exports.setdefault(k.py_func.__name__, []).append([export, key])
            n += 1
    record = {**jit._current(), "name": f"aot_{name}", "file": None, "exports": exports}
    jit.AOT_DIR.mkdir(parents=True, exist_ok=True)
    if n:
        # every exported kernel releases the GIL, as numba's nogil=True does (the trainer
        # runs its kernels on threads); pycc offers no per-kernel option for it
        class Flags(pycc_compiler.Flags):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.release_gil = True
        pycc_compiler.Flags = Flags
        cc.target_cpu = "host"
        with tempfile.TemporaryDirectory(dir=jit.AOT_DIR, prefix=f".aot-{name}-") as tmp:
            cc.output_dir = tmp
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cc.compile()
            built = Path(cc.output_file).name
            os.replace(Path(tmp) / built, jit.AOT_DIR / built)
        record["file"] = built
    tmp_record = jit.build_record(name).with_suffix(".json.tmp")
    tmp_record.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(tmp_record, jit.build_record(name))
    return f"{name}: {n} kernel versions built ahead of time ({numba.__version__})"


def build_all_aot() -> None:
    """build_aot for every kernel module, each in a process of its own, two at a time."""
    from algorithms import jit

    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def one(name: str) -> str:
        cp = subprocess.run([sys.executable, __file__, "--aot-module", name], cwd=ROOT, env=env,
                            capture_output=True, text=True)
        if cp.returncode != 0:
            return (f"{name}: not built ahead of time ({last_line(cp)[:200]}); its kernels "
                    "are compiled on first use")
        return cp.stdout.strip()

    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        for line in pool.map(one, jit.kernel_modules()):
            print(line)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--aot-module"]:
        print(build_aot(argv[1]))
        return
    if argv[:1] == ["--exercise"]:
        exercise()
        return
    t0 = time.time()
    if argv[:1] != ["--aot-only"]:
        with tempfile.TemporaryDirectory(prefix="compile-kernels-") as tmp:
            d = Path(tmp) / "data"
            run(["download_data.py", "--dataset", "sample", "--output", d / "raw",
                 "--workers", "1"])
            todo = chains(d)
            todo[0].append(["scripts/compile_kernels.py", "--exercise"])
            with ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))
                                    ) as pool:
                for f in [pool.submit(run_chain, c) for c in todo]:
                    f.result()
        print(f"compiled the kernels (cached beside their modules) in {time.time() - t0:.0f} s")
    t1 = time.time()
    build_all_aot()
    print(f"built the kernels ahead of time in {time.time() - t1:.0f} s")


if __name__ == "__main__":
    main()

"""What every benchmark shares: the corpus of distinct documents, and naming the CPU.

The benchmarks run on data/bench_corpus/ (scripts/build_bench_corpus.py): ~1.1 GB of
distinct real documents, 77% English and 9.5% Chinese by bytes. A prefix of any size has
the same mix. Repeating the bundled sample, as earlier versions did, let piece caches and
branch predictors see the same text again and again and flattered the kernels; only the
smoke run (--quick) still uses the sample, read once.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "bench_corpus"
SAMPLE = ROOT / "data" / "sample" / "sample.parquet"
AVX2_CPU = "znver2"  # an AVX2 CPU without AVX-512, for numba's code generation


def spread(n: int, k: int) -> list[int]:
    """k of the n blocks (all of them if n <= k), evenly spread from the first: where a
    reference too slow for the whole corpus is timed, and ours beside it."""
    return list(range(0, n, -(-n // k))) if n else []


def blocks_text(chosen: list[int], mb: float) -> str:
    """"5 blocks, 20.8 MB": the part of the corpus those blocks are."""
    return f"{len(chosen)} block{'s' if len(chosen) != 1 else ''}, {mb:.1f} MB"


def corpus_texts(mb: float, corpus: Path = CORPUS, quick: bool = False,
                 inputs: list[str] | None = None) -> list[str]:
    """The first `mb` MB of distinct documents: given files first, then the corpus.
    quick: the bundled sample (read once, however small), for smoke tests."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    texts: list[str] = []
    if inputs:
        from pipeline.sources import Skips, expand_inputs, read_sources

        for spec in inputs:
            for t in read_sources(expand_inputs(spec), Skips()):
                texts += t.column("text").to_pylist()
    sources = [SAMPLE] if quick else sorted(Path(corpus).glob("*.parquet"))
    if not sources:
        raise SystemExit(f"{corpus} holds no parquet shards: build the benchmark corpus with "
                         "`make bench-corpus` (scripts/build_bench_corpus.py)")
    want, got = mb * 1e6, sum(len(t.encode("utf-8")) for t in texts)
    for f in sources:
        if got >= want:
            break
        col = pq.read_table(f, columns=["text"]).column("text")
        sizes = pc.binary_length(col).to_numpy(zero_copy_only=False).cumsum()
        n = int((sizes < want - got).sum()) + 1
        part = col.slice(0, n).to_pylist()
        texts += part
        got += int(sizes[min(n, len(sizes)) - 1])
    if got < want * 0.95 and not quick:
        raise SystemExit(f"{corpus} holds {got / 1e6:.0f} MB of text, not {mb:g} MB")
    return texts


def cpu_model() -> str:
    """'AMD EPYC, AVX-512' or '..., AVX2 (no AVX-512)': the machine a figure was measured on,
    as the kernel reports it (a VM may hide the exact model)."""
    name, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        import platform
        name = platform.processor() or name
    isa = "AVX-512" if "avx512f" in flags else "AVX2 (no AVX-512)" if "avx2" in flags else "no AVX2"
    if os.environ.get("NUMBA_CPU_NAME"):
        isa += f"; compiled kernels built for {os.environ['NUMBA_CPU_NAME']}"
    return f"{name}, {isa}"


def cpu_flags() -> str:
    """'avx2: yes, avx512f: yes, ...': the vector extensions /proc/cpuinfo lists."""
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return ", ".join(f"{f}: {'yes' if f in flags else 'no'}"
                     for f in ("avx2", "avx512f", "avx512bw", "avx512vl"))


def stage_env() -> dict:
    """Environment for a stage run as a subprocess, as a user's shell runs it: the
    repository on PYTHONPATH, and Python's bytecode cache on (a PYTHONDONTWRITEBYTECODE
    inherited from the benchmark's shell would have every timed run compile the suite's
    modules again, about 0.05 s a run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_script(script: str, *args) -> float:
    """Run one of the repository's scripts as a user does (a subprocess, stage_env) and
    return its wall time in seconds; a failure raises, with the end of its stderr."""
    import subprocess
    import sys
    import time

    t0 = time.time()
    cp = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                        capture_output=True, text=True, env=stage_env())
    if cp.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(map(str, args))}: {cp.stderr[-2000:]}")
    return time.time() - t0


def numpy_avx512() -> list[str]:
    """numpy's AVX-512 code paths (dispatch targets) enabled in this process."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return [f for f in __cpu_dispatch__ if f.startswith("AVX512") and __cpu_features__.get(f)]


def avx2_env(base: dict | None = None) -> dict:
    """Environment for a child process that runs AVX2 code only: numba compiles for an
    AVX2 CPU (both variables are needed: a CPU name alone keeps the host's features) and
    numpy's AVX-512 paths are switched off."""
    env = dict(base if base is not None else os.environ, NUMBA_CPU_NAME=AVX2_CPU,
               NUMBA_CPU_FEATURES="")
    off = numpy_avx512()
    if off:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(off)
    return env

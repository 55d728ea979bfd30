"""Benchmark: MinHash signatures (k=128, character 5-grams) against datatrove and datasketch.

    python bench/bench_minhash.py                 # 50 MB corpus from the bundled sample
    python bench/bench_minhash.py --mb 20 --max-mb 5
    python bench/bench_minhash.py --input '/tmp/docs/*.parquet'   # given text (column text)
    python bench/bench_minhash.py --isa avx2      # as on a CPU without AVX-512
    python bench/bench_minhash.py --isa both      # native and avx2 side by side

Three implementations sign the same documents in this process (one core), block by block,
in rotating order so drifting load on a shared machine hits all of them alike:

- ours: `dedup_minhash.MinHasher(num_perm=128, ngram=5).signatures`, exactly what a
  dedup_minhash.py signature task runs per batch (normalisation included);
- datasketch: `MinHash(num_perm=128).update_batch` on the UTF-8 encoded set of
  character 5-grams of the same normalised text;
- datatrove: `MinhashDedupSignature` (its default 16 x 8 = 128 hashes, xxhash 64-bit),
  `get_signature(get_shingles(text))` per document, i.e. its per-document work without
  the file writes. Its default English word tokenizer needs spaCy, which is not
  installed here (and ANCHORS.md measured it on word 5-grams), so it gets a character
  tokenizer: its n-grams are then character 5-grams, like ours. Its default xxhash
  shingle hash passes a str to xxhash 4, which refuses it; we give it the UTF-8 bytes.

Throughput is text MB per CPU-second of this process. The references are slow (about
1 MB/s), so all three are timed on the first --max-mb MB of the corpus (default 10).
Targets: ours >= 20x datatrove on AVX2 code without AVX-512 (issue 12; it was 10x) and
>= 5x datasketch.

The corpus repeats the bundled sample (about 1/3 Chinese) unless --input gives text.
--isa avx2 re-runs the benchmark in a child process whose numba kernels are compiled for
an AVX2 CPU without AVX-512 (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES) and whose numpy skips
its AVX-512 code paths (NPY_DISABLE_CPU_FEATURES), as on most AMD EPYC before Zen 4; the
numba cache keeps one build per CPU target. Every run prints the CPU model and whether
AVX-512 was used (zmm registers in the compiled kernel, numpy's dispatched features).
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from common import avx2_env, cpu_model, numpy_avx512  # noqa: E402

TARGETS = {"datatrove": 20.0, "datasketch": 5.0}
BLOCK_BYTES = 1_000_000


def ours_fn():
    from algorithms.minhash import MinHasher

    mh = MinHasher(num_perm=128, ngram=5)
    # compile or load the cache outside timing, also of the path for a capital sigma
    mh.signatures(["warm up the numba kernels", "x", "ΟΔΟΣ"])

    def sign(texts):
        for i in range(0, len(texts), 2048):               # the stage's batch size
            mh.signatures(texts[i:i + 2048])
    return sign


def datasketch_fn():
    from datasketch import MinHash

    from algorithms.exact_dedup import normalise

    def sign(texts):
        for t in texts:
            n = normalise(t)
            sh = {n[i:i + 5] for i in range(len(n) - 4)} or {n}
            m = MinHash(num_perm=128)
            m.update_batch([s.encode("utf-8") for s in sh])
    return sign


def datatrove_fn():
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.utils.word_tokenizers import WordTokenizer

    class CharTokenizer(WordTokenizer):
        """Characters as 'words', so datatrove's 5-grams are character 5-grams."""

        def word_tokenize(self, text):
            return list(text)

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            return [(0, len(text))]

    step = MinhashDedupSignature(output_folder=str(ROOT / "bench" / "results" / "_unused"),
                                 language=CharTokenizer())
    try:
        step.get_shingles("hello world")
    except TypeError:
        # datatrove 0.10.1 passes str to xxhash.xxh64_intdigest, which xxhash 4 refuses
        # ("Strings must be encoded before hashing"); hash the UTF-8 bytes as it intends
        import xxhash
        step._hash_func = lambda s: xxhash.xxh64_intdigest(s.encode("utf-8"))

    def sign(texts):
        for t in texts:
            sh = step.get_shingles(t)
            if sh.size:
                step.get_signature(sh)
    return sign


def datatrove_word_tokenizer_available() -> str:
    try:
        from datatrove.pipeline.dedup import MinhashDedupSignature
        MinhashDedupSignature(output_folder=str(ROOT / "bench" / "results" / "_unused")).get_shingles("a b c d e f")
        return "yes"
    except Exception as e:  # the English tokenizer needs spaCy
        return f"no ({str(e).splitlines()[0]})"


def blocks(texts: list[str], max_bytes: float) -> list[list[str]]:
    out, cur, size, total = [], [], 0, 0
    for t in texts:
        b = len(t.encode("utf-8"))
        if total + b > max_bytes and total > 0:
            break
        cur.append(t)
        size += b
        total += b
        if size >= BLOCK_BYTES:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def run(corpus_texts: list[str], quick: bool = False, max_mb: float = 10.0) -> dict:
    """Time the three implementations on the same documents; rows of {name,
    mb_per_s_per_core, ratio, target, ok}. quick: a tiny pass (for the smoke test)."""
    if quick:
        max_mb = min(max_mb, 0.05)
    bl = blocks(corpus_texts, max_mb * 1e6)
    fns = {"ours": ours_fn(), "datasketch": datasketch_fn(), "datatrove": datatrove_fn()}
    cpu = dict.fromkeys(fns, 0.0)
    nbytes = 0
    names = list(fns)
    for i, b in enumerate(bl):
        nbytes += sum(len(t.encode("utf-8")) for t in b)
        for name in names[i % 3:] + names[:i % 3]:   # rotate who goes first
            t0 = time.process_time()
            fns[name](b)
            cpu[name] += time.process_time() - t0
    mbps = {k: nbytes / 1e6 / max(v, 1e-9) for k, v in cpu.items()}
    rows = []
    for ref in ("datatrove", "datasketch"):
        rows.append({"name": ref, "mb_per_s_per_core": mbps[ref], "ratio": None, "target": None,
                     "ok": None})
    worst_ok = all(mbps["ours"] / mbps[r] >= t for r, t in TARGETS.items())
    ratio_dt = mbps["ours"] / mbps["datatrove"]
    ratio_ds = mbps["ours"] / mbps["datasketch"]
    rows.append({"name": "ours", "mb_per_s_per_core": mbps["ours"],
                 "ratio": ratio_dt, "target": ">= 20x datatrove", "ok": ratio_dt >= TARGETS["datatrove"],
                 "ours": True})
    rows.append({"name": "ours vs datasketch", "mb_per_s_per_core": mbps["ours"], "ratio": ratio_ds,
                 "target": ">= 5x datasketch", "ok": ratio_ds >= TARGETS["datasketch"]})
    return {"rows": rows, "measured_mb": round(nbytes / 1e6, 2), "all_ok": worst_ok,
            "datatrove_word_tokenizer": datatrove_word_tokenizer_available()}


# --------------------------------------------------------------------------------------
# Instruction sets: what this process runs on, and a child process without AVX-512.
# --------------------------------------------------------------------------------------

def kernel_uses_avx512() -> bool:
    """Whether the signature kernel's inner loop compiles to AVX-512 (zmm registers) here.

    Compiles an uncached copy of dedup_minhash.min_hashes (cached code cannot be
    inspected) for the same target, and looks at its assembly."""
    import numpy as np
    from numba import njit

    from algorithms.minhash_fast import min_hashes

    fresh = njit(min_hashes.py_func)
    u32 = np.zeros(16, np.uint32)
    fresh(u32, 16, u32, u32, np.zeros(16, np.uint64), u32.copy())
    return "zmm" in fresh.inspect_asm(fresh.signatures[0])


def isa_info() -> dict:
    """The CPU, the target numba compiles for, and where AVX-512 is in use."""
    import llvmlite.binding as ll
    from numba.core import config

    host = ll.get_host_cpu_name()
    return {"cpu": cpu_model(), "host": host, "numba_target": config.CPU_NAME or host,
            "kernel_avx512": kernel_uses_avx512(), "numpy_avx512": numpy_avx512()}


def describe_isa(info: dict) -> str:
    """isa_info() as one line."""
    return (f"CPU {info['cpu']} (LLVM: {info['host']}); numba kernels built for "
            f"{info['numba_target']}, AVX-512 used: {'yes' if info['kernel_avx512'] else 'no'}; "
            f"numpy AVX-512 paths: {', '.join(info['numpy_avx512']) or 'none'}")


def run_child(argv: list[str], isa: str) -> dict:
    """The benchmark with these arguments in a child process without AVX-512."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--isa", isa, "--child",
               "--result-json", str(out)]
        cp = subprocess.run(cmd, env=avx2_env())
        if cp.returncode != 0 or not out.exists():
            raise SystemExit(f"the {isa} child run failed (exit {cp.returncode})")
        return json.loads(out.read_text())


# --------------------------------------------------------------------------------------

def read_input(spec: str) -> list[str]:
    """The text column of a parquet file, or of every file a glob matches (sorted)."""
    import pyarrow.parquet as pq

    files = sorted(glob.glob(spec)) or [spec]
    texts: list[str] = []
    for f in files:
        texts += pq.read_table(f, columns=["text"]).column("text").to_pylist()
    return texts


def measure(args) -> dict:
    """One benchmark in this process: the corpus, the timings and the instruction sets."""
    if args.input:
        texts, source = read_input(args.input), args.input
    else:
        from common import corpus_texts
        texts, source = corpus_texts(args.mb), f"the first {args.mb:g} MB of the benchmark corpus (distinct documents)"
    res = run(texts, quick=args.quick, max_mb=args.max_mb)
    res.update(docs=len(texts), source=source, isa=isa_info())
    return res


def fmt_row(r: dict) -> list:
    """A result row's MB/s, ratio and ok, as table cells."""
    return [round(r["mb_per_s_per_core"], 2), "" if r["ratio"] is None else f"{r['ratio']:.1f}x",
            "" if r["ok"] is None else ("yes" if r["ok"] else "NO")]


def report(results: dict[str, dict]) -> None:
    """One table: a column group per instruction set, side by side."""
    from pipeline.tables import table

    first = next(iter(results.values()))
    print(f"text: {first['source']}; measured on the same {first['measured_mb']} MB "
          f"({first['docs']:,} documents in the corpus), k=128, character 5-grams, one process")
    for isa, res in results.items():
        print(f"{isa}: {describe_isa(res['isa'])}")
    head = ["implementation", "target"]
    for isa in results:
        head += [f"{isa} MB/s", f"{isa} ratio", f"{isa} ok"]
    rows = []
    for i, r in enumerate(first["rows"]):
        row = [r["name"], r["target"] or ""]
        for res in results.values():
            row += fmt_row(res["rows"][i])
        rows.append(row)
    print(table(head, rows))
    print(f"datatrove's default English word tokenizer usable here: "
          f"{first['datatrove_word_tokenizer']}")


def child_argv(args) -> list[str]:
    """The arguments that choose the corpus and the amount, for a child run."""
    argv = ["--mb", str(args.mb), "--max-mb", str(args.max_mb)]
    if args.input:
        argv += ["--input", args.input]
    return argv + (["--quick"] if args.quick else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=50.0, help="corpus size in MB (default 50)")
    p.add_argument("--max-mb", type=float, default=10.0,
                   help="MB of the corpus all three sign (default 10)")
    p.add_argument("--input", help="parquet file or glob with a text column, instead of the "
                                   "repeated bundled sample")
    p.add_argument("--isa", choices=["native", "avx2", "both"], default="native",
                   help="native: this CPU as it is; avx2: a child process without AVX-512; "
                        "both: the two side by side (default native)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result-json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    results: dict[str, dict] = {}
    if args.child or args.isa in ("native", "both"):
        results["native" if args.isa == "both" else args.isa] = measure(args)
    if not args.child and args.isa in ("avx2", "both"):
        results["avx2"] = run_child(child_argv(args), "avx2")
    if args.result_json:
        Path(args.result_json).write_text(json.dumps(next(iter(results.values()))))
        return 0
    report(results)
    ok = all(res["all_ok"] for res in results.values())
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_minhash.py", "requirements-bench.txt")
    sys.exit(main())

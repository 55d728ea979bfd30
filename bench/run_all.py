"""The benchmark suite (`make bench`): every stage beside its anchor, in one run.

    python bench/run_all.py                 # 250 MB of the benchmark corpus (distinct documents)
    python bench/run_all.py --isa avx2      # the same, compiled for a CPU without AVX-512
    python bench/run_all.py --mb 500 --input 'my_text/*.parquet'
    python bench/run_all.py --quick         # tiny smoke run on the bundled sample (the tests)

Each bench/bench_<name>.py module measures one stage and its reference side by side on
the same documents in one process (per-core figures) and returns rows of
{name, mb_per_s_per_core, ratio, target, ok}; bench_rerun times a stage's first run and
its rerun with one threshold changed. This script takes the corpus once, runs
every module in a fresh subprocess (so peak RSS is that benchmark's own), prints MB/s
per core, peak RSS and the ratios against each stage issue's target, and projects the
wall time of FineWeb-Edu sample-10BT (28.5 GB) at 2, 16 and 64 cores. It exits 1 when a
ratio misses its target. It is not a test: machines are noisy, so the ratios (measured
side by side) are what to quote, not the absolute speeds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import avx2_env, corpus_texts, cpu_model  # noqa: E402

BENCHES = ["clean", "quality_signals", "decont", "dedup_exact", "minhash", "tokenizer", "trainer",
           "pack", "rerun"]
FINEWEB_BYTES = 28.5e9
# which measured row stands for each pipeline stage in the projection
PROJECTION_ROWS = {
    "clean": "clean",
    "dedup_exact": "dedup_exact",
    "dedup_minhash": "minhash",
    "train_tokenizer": "tokenizer",
    "pack_parallel": "pack",
}
# train_tokenizer reads a 5% sample (section 4.7), capped at 2 GB, not the whole corpus
STAGE_BYTES = {"train_tokenizer": min(0.05 * FINEWEB_BYTES, 2e9)}


def run_one(name: str, corpus_file: str, quick: bool) -> dict:
    """Run bench_<name>.run() in this process and report its rows and peak RSS."""
    import pyarrow.parquet as pq

    texts = pq.read_table(corpus_file).column("text").to_pylist()
    mod = importlib.import_module(f"bench_{name}")
    t0 = time.time()
    res = mod.run(texts, quick=quick)
    rows = res.get("rows", res) if isinstance(res, dict) else res
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"bench": name, "rows": rows, "peak_rss_mb": round(rss, 1),
            "seconds": round(time.time() - t0, 1),
            "corpus_mb": round(sum(len(t.encode()) for t in texts) / 1e6, 2),
            "extra": {k: v for k, v in (res.items() if isinstance(res, dict) else []) if k != "rows"}}


def project(results: list[dict]) -> list[list]:
    """Wall time for 28.5 GB at 2, 16 and 64 cores from per-core MB/s (linear scaling)."""
    rows = []
    ours = {}
    for r in results:
        for row in r["rows"]:
            # "ours" is the row measured against a target (or flagged explicitly)
            if (row.get("ours") or row.get("target")) and r["bench"] not in ours \
                    and row.get("mb_per_s_per_core"):
                ours[r["bench"]] = row["mb_per_s_per_core"]
    for stage, bench in PROJECTION_ROWS.items():
        if bench in ours and ours[bench]:
            secs = STAGE_BYTES.get(stage, FINEWEB_BYTES) / (ours[bench] * 1e6)
            rows.append([stage, ours[bench]] + [secs / c / 60 for c in (2, 16, 64)])
    return rows


def _fmt_proj(proj: list[list]) -> list[list[str]]:
    return [[a, f"{b:.2f}"] + [f"{x:.1f}" for x in c] for a, b, *c in proj]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=250.0,
                   help="MB of the benchmark corpus to run on (default 250)")
    p.add_argument("--isa", choices=["native", "avx2"], default="native",
                   help="avx2: compile the kernels for an AVX2 CPU and keep numpy off AVX-512, "
                        "to check figures for machines without AVX-512")
    p.add_argument("--input", action="append", help="real text to include (path or glob)")
    p.add_argument("--only", default=",".join(BENCHES), help="comma-separated benchmarks")
    p.add_argument("--quick", action="store_true", help="tiny smoke run: shape, not speed")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where results go")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--corpus", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from pipeline.requirements import require

    require("bench/run_all.py", "requirements-bench.txt")   # the anchors
    if args.one:  # child process: one benchmark
        # numpy scalars become plain numbers
        print(json.dumps(run_one(args.one, args.corpus, args.quick),
                         default=lambda o: o.item() if hasattr(o, "item") else str(o)))
        return 0

    from pipeline.tables import markdown_table, table

    mb = 0.3 if args.quick and args.mb == 250.0 else args.mb
    names = [n for n in args.only.split(",") if n]
    missing = [n for n in names if not (ROOT / "bench" / f"bench_{n}.py").exists()]
    names = [n for n in names if n not in missing]
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = corpus_texts(mb, quick=args.quick, inputs=args.input)
    corpus_mb = sum(len(t.encode()) for t in texts) / 1e6
    source = "the bundled sample" if args.quick else "the benchmark corpus (distinct documents)"
    cpu = cpu_model() + ("; AVX2 code only (numba for znver2, numpy AVX-512 off)"
                         if args.isa == "avx2" else "")
    print(f"corpus: {len(texts):,} documents, {corpus_mb:.1f} MB of "
          f"{'given files + ' if args.input else ''}{source}\nCPU: {cpu}")
    results = []
    with tempfile.TemporaryDirectory() as td:
        cf = os.path.join(td, "corpus.parquet")
        pq.write_table(pa.table({"text": texts}), cf)
        for n in names:
            print(f"running bench_{n} ...", flush=True)
            cp = subprocess.run([sys.executable, __file__, "--one", n, "--corpus", cf]
                                + (["--quick"] if args.quick else []),
                                capture_output=True, text=True, cwd=ROOT,
                                env=avx2_env() if args.isa == "avx2" else None)
            if cp.returncode != 0:
                print(cp.stderr[-3000:], file=sys.stderr)
                results.append({"bench": n, "rows": [], "error": cp.stderr.strip().splitlines()[-1:]})
                continue
            results.append(json.loads(cp.stdout.strip().splitlines()[-1]))

    head = ["bench", "implementation", "MB/s per core", "ratio", "target", "ok", "peak RSS MB"]
    rows = []
    failed = []
    for r in results:
        if r.get("error"):
            rows.append([r["bench"], "ERROR: " + " ".join(r["error"]), "", "", "", "FAIL", ""])
            failed.append(r["bench"])
        for row in r["rows"]:
            ok = row.get("ok")
            speed = row.get("mb_per_s_per_core")
            rows.append([r["bench"], row["name"], "-" if speed is None else f"{speed:.2f}",
                         "" if row.get("ratio") is None else f"{row['ratio']:.2f}",
                         str(row.get("target") or ""), "" if ok is None else ("yes" if ok else "NO"),
                         f"{r['peak_rss_mb']:.0f}"])
            if ok is False:
                failed.append(f"{r['bench']}: {row['name']}")
    print()
    print(table(head, rows))
    proj = project(results)
    ph = ["stage", "MB/s per core", "2 cores (min)", "16 cores (min)", "64 cores (min)"]
    if proj:
        print("\nprojected wall time for FineWeb-Edu sample-10BT (28.5 GB), linear scaling:")
        print(table(ph, _fmt_proj(proj)))
        slowest = max(proj, key=lambda r: r[2])
        print(f"dominant stage: {slowest[0]} ({slowest[1]:.2f} MB/s per core, "
              f"{slowest[2] / sum(r[2] for r in proj):.0%} of the projected time)")
    if missing:
        print(f"\nnot measured (no bench script yet): {', '.join(missing)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python bench/run_all.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = [f"Command: `{cmd.strip()}`", "", f"Corpus: {len(texts):,} documents, {corpus_mb:.1f} MB "
          f"of {source}", "", f"CPU: {cpu}", "",
          markdown_table(head, rows)]
    if proj:
        md += ["", markdown_table(ph, _fmt_proj(proj))]
    (out / ("quick.md" if args.quick else "latest.md")).write_text("\n".join(md) + "\n")
    (out / ("quick.json" if args.quick else "latest.json")).write_text(json.dumps(results, indent=2))
    if failed and not args.quick:
        print(f"\nmissed targets: {'; '.join(failed)}")
        return 1
    if failed and args.quick and any(r.get("error") for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

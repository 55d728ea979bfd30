#!/usr/bin/env python3
"""Run every stage on one input and record what it wrote: the digest of every data file
and the counts of every manifest. Two records are equal only if the outputs are
byte-identical, so a change that should only move code can be checked against a record
made before it.

    python scripts/output_digests.py --sample --out /tmp/sample.json
    python scripts/output_digests.py --corpus-mb 250 --out /tmp/bench250.json
    python scripts/output_digests.py --sample --compare tests/data/sample_digests.json
    python scripts/output_digests.py --corpus-mb 50 --engines   # fast against reference

--sample runs the bundled sample with `make demo`'s flags (scripts/demo_args.sh);
--corpus-mb N runs the first N MB of the benchmark corpus (data/bench_corpus/, built by
`make bench-corpus`) at default flags. Each stage's command is the one a user types,
with --input/--output pointing into a scratch folder (--data, default a temporary one).

What is recorded, per stage: the files its manifest lists (name, size, xxh3-128) and,
for the stages that keep per-document measurements (clean's signals, dedup_minhash's
signatures, band hashes and candidates), every file of those stores; and the manifest's
counts. Timings, resources and paths are left out: they differ from run to run.

--engine reference runs every stage that has one with `--engine reference` (the
tutorial's readable code); --engines runs the chain once with each engine and compares
the two records (the counts may differ only in the name of pack's encoder), printing
each chain's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "sample.parquet"
CORPUS = ROOT / "data" / "bench_corpus"
# kept stores: folders inside an output whose files are data too
STORES = ("signals", "signatures", "bands", "candidates")


def steps(data: Path, raw_input: str | None, sample: bool) -> list[tuple[str, list[str]]]:
    """(script, arguments) of every stage, in pipeline order, reading and writing in data/."""
    d = data
    return [
        ("download_data.py", (["--dataset", "sample"] if sample else ["--input", raw_input])
         + ["--output", str(d / "raw")]),
        ("clean.py", ["--input", str(d / "raw"), "--output", str(d / "cleaned")]),
        ("dedup_exact.py", ["--input", str(d / "cleaned"), "--output", str(d / "dedup_exact")]),
        ("dedup_minhash.py", ["--input", str(d / "dedup_exact"), "--output", str(d / "dedup")]),
        ("train_tokenizer.py", ["--input", str(d / "dedup"), "--output", str(d / "tokenizer")]
         + (["--vocab-size", "8000"] if sample else [])),
        ("pack_parallel.py", ["--input", str(d / "dedup"), "--tokenizer",
                              str(d / "tokenizer" / "tokenizer.json"), "--output", str(d)]),
    ]


def digest(path: Path) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def record_stage(manifest: Path) -> dict:
    m = json.loads(manifest.read_text(encoding="utf-8"))
    folder = manifest.parent
    files = {f["name"]: [f["size"], f["xxh3_128"]] for f in m["files"]}
    for store in STORES:
        for p in sorted((folder / store).rglob("*")) if (folder / store).is_dir() else []:
            if p.is_file():
                files[p.relative_to(folder).as_posix()] = [p.stat().st_size, digest(p)]
    return {"counts": m["counts"], "files": files}


def record(data: Path) -> dict:
    out = {}
    for name in ("raw", "cleaned", "dedup_exact", "dedup", "tokenizer"):
        out[name] = record_stage(data / name / "manifest.json")
    out["pack"] = record_stage(data / "pack_manifest.json")
    return out


def corpus_prefix(mb: float, dst: Path) -> Path:
    """The first `mb` MB of text of the benchmark corpus as one parquet file (id, text)."""
    shards = sorted(CORPUS.glob("part-*.parquet"))
    if not shards:
        raise SystemExit(f"{CORPUS} holds no shards: run `make bench-corpus` first")
    want, got, parts = mb * 1e6, 0, []
    for s in shards:
        t = pq.read_table(s, columns=["id", "text"])
        sizes = pc.binary_length(t.column("text")).to_numpy(zero_copy_only=False).cumsum()
        n = int((sizes < want - got).sum()) + 1
        parts.append(t.slice(0, n))
        got += int(sizes[min(n, len(sizes)) - 1])
        if got >= want:
            break
    pq.write_table(pa.concat_tables(parts), dst, compression="zstd")
    return dst


# the stages that run either engine (--engine)
ENGINE_STAGES = ("clean.py", "dedup_exact.py", "dedup_minhash.py", "train_tokenizer.py",
                 "pack_parallel.py")


def run_all(data: Path, sample: bool, corpus_mb: float | None, workers: int,
            engine: str = "fast") -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    raw_input = None
    if not sample:
        raw_input = str(corpus_prefix(corpus_mb, data / "input.parquet"))
    for script, args in steps(data, raw_input, sample):
        if script in ENGINE_STAGES and engine != "fast":
            args = [*args, "--engine", engine]
        cmd = [sys.executable, str(ROOT / script), *args, "--workers", str(workers)]
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        cp = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if cp.returncode != 0:
            raise SystemExit(f"{script} exited {cp.returncode}:\n{cp.stderr[-3000:]}")
    return record(data)


def differences(a: dict, b: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """What differs between two records, one line per file or count (ignore: counts that
    may differ)."""
    out = []
    for stage in sorted(set(a) | set(b)):
        sa, sb = a.get(stage), b.get(stage)
        if sa is None or sb is None:
            out.append(f"{stage}: only in {'the new' if sa is None else 'the recorded'} run")
            continue
        ca = {k: v for k, v in sa["counts"].items() if k not in ignore}
        if ca != {k: v for k, v in sb["counts"].items() if k not in ignore}:
            out.append(f"{stage}: counts differ: {sa['counts']} != {sb['counts']}")
        for name in sorted(set(sa["files"]) | set(sb["files"])):
            if sa["files"].get(name) != sb["files"].get(name):
                out.append(f"{stage}/{name}: {sa['files'].get(name)} != {sb['files'].get(name)}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sample", action="store_true", help="the bundled sample, demo flags")
    src.add_argument("--corpus-mb", type=float, help="the first N MB of data/bench_corpus/")
    p.add_argument("--data", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default=None, help="write the record here (JSON)")
    p.add_argument("--compare", default=None, help="a recorded JSON to compare with")
    p.add_argument("--engine", choices=["fast", "reference"], default="fast",
                   help="the engine of every stage that has one (default fast)")
    p.add_argument("--engines", action="store_true",
                   help="run the chain with each engine and compare the two records")
    args = p.parse_args(argv)
    if args.engines:
        return compare_engines(args)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data or tmp)
        data.mkdir(parents=True, exist_ok=True)
        rec = run_all(data, args.sample, args.corpus_mb, args.workers, args.engine)
    if args.out:
        Path(args.out).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.out}")
    if args.compare:
        diff = differences(json.loads(Path(args.compare).read_text()), rec)
        for line in diff:
            print(line)
        print("identical" if not diff else f"{len(diff)} differences")
        return 1 if diff else 0
    return 0


def compare_engines(args) -> int:
    """The chain with each engine, in folders of their own; 0 when every data file and
    every count (but the encoder's name) is the same."""
    recs, secs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("fast", "reference"):
            data = Path(args.data or tmp) / engine
            data.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            recs[engine] = run_all(data, args.sample, args.corpus_mb, args.workers, engine)
            secs[engine] = time.time() - t0
    if args.out:
        Path(args.out).write_text(json.dumps(recs, indent=1, sort_keys=True) + "\n")
    diff = differences(recs["fast"], recs["reference"], ignore=("encoder",))
    for line in diff:
        print(line)
    files = sum(len(r["files"]) for r in recs["fast"].values())
    print(f"fast {secs['fast']:.1f} s, reference {secs['reference']:.1f} s (wall, --workers "
          f"{args.workers}); " + (f"all {files} data files identical" if not diff
                                  else f"{len(diff)} differences"))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())

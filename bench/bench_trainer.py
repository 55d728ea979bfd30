"""Benchmark: the default tokenizer trainer (BpeTrainer compiled) against BpeTrainer, side by side.

    python bench/bench_trainer.py                       # 37 and 200 MB of the benchmark corpus
    python bench/bench_trainer.py --sizes 37 --repeat 3 --vocab-size 32000

The documents are split as train_tokenizer.py splits them: held out by a seeded hash of
the id (5 MB), the rest cropped to 100,000 characters; each size is a prefix of that
training sample. The trainers of algorithms/bpe_trainer.py train on the same prefix:
train_hf (the tutorial's BpeTrainer) and train_fast (the default: BpeTrainer's algorithm
compiled), and so does bench/rustbpe_eval.py's train_rustbpe (rustbpe, evaluated first,
not the default). Each run is a subprocess of its own (fresh thread pools,
RAYON_NUM_THREADS set, its own peak RSS), timed around the training call alone: wall
seconds and CPU seconds (all threads of the process). The runs alternate, BpeTrainer,
the compiled trainer (2 threads, then 1, to show what the second thread gains), rustbpe,
--repeat times, so the load of a shared machine falls on all alike; the medians are
reported.

Then, for each size: whether the compiled trainer's tokenizer.json is BpeTrainer's byte
for byte, bytes per token of each tokenizer on the held-out English and Chinese
documents, and how many tokens of one vocabulary are not in BpeTrainer's.
Target: the compiled trainer at least 3x BpeTrainer in CPU seconds and in wall seconds
at 2 threads, and bytes per token within 0.5% of BpeTrainer's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

TARGET = 3.0          # rustbpe's speed-up over BpeTrainer, CPU s and wall s
QUALITY = 0.005       # bytes/token within this share of BpeTrainer's
HELDOUT_BYTES = 5_000_000
ENGINE = {"fast": "fast", "hf": "reference"}   # a trainer -> the train_tokenizer.py engine that runs it
MAX_DOC_CHARS = 100_000


def split_like_the_stage(texts: list[str], heldout_bytes: int = HELDOUT_BYTES):
    """(training texts in corpus order, cropped; held-out table text/lang), as
    train_tokenizer.sample_unit draws them (ids: the documents' positions)."""
    import numpy as np
    import pyarrow as pa

    from algorithms import tokenizer_sample
    from algorithms.ids import id_hashes

    lengths = np.array([len(t.encode("utf-8")) for t in texts], np.int64)
    cuts = tokenizer_sample.share_cuts(min(heldout_bytes / max(lengths.sum(), 1), tokenizer_sample.HELDOUT_MAX_SHARE), 1.0)
    held, train = tokenizer_sample.choose_rows(id_hashes([str(i) for i in range(len(texts))], 0), lengths, cuts)
    held_texts = [texts[i] for i in held]
    langs = tokenizer_sample.doc_languages(*tokenizer_sample.script_counts(pa.array(held_texts, pa.string())))
    return ([texts[i][:MAX_DOC_CHARS] for i in train],
            pa.table({"text": pa.array(held_texts, pa.string()), "lang": list(langs)}))


def cpu_flags() -> str:
    """'AVX2 yes, AVX-512 no': the vector extensions /proc/cpuinfo lists (Rust and numba
    code may use them)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        return "flags unknown"
    return (f"AVX2 {'yes' if 'avx2' in flags else 'no'}, "
            f"AVX-512 {'yes' if 'avx512f' in flags else 'no'}")


def prefix(texts: list[str], mb: float) -> list[str]:
    out, size = [], 0
    for t in texts:
        if size >= mb * 1e6:
            break
        out.append(t)
        size += len(t.encode("utf-8"))
    return out


class Restartable:
    """Batches that can be read more than once: each pass calls make() for a new stream
    (train_rustbpe reads them again when min_frequency cuts its merges short)."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return iter(self.make())


def child(trainer: str, threads: int, vocab: int, texts_file: str, out: str) -> None:
    """One training run in this process: prints its wall and CPU seconds and peak RSS."""
    import pyarrow.parquet as pq

    from algorithms import bpe_trainer
    from algorithms.tokenizer_file import SPECIAL_TOKENS

    texts = pq.read_table(texts_file).column("text").to_pylist()
    batches = Restartable(lambda: (texts[i:i + 1000] for i in range(0, len(texts), 1000)))
    if trainer == "rustbpe":
        from rustbpe_eval import train_rustbpe as fn
    else:
        fn = getattr(bpe_trainer, f"train_{trainer}")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu, wall = time.process_time(), time.time()
    tok = fn(batches, vocab, 2, SPECIAL_TOKENS, threads)
    cpu, wall = time.process_time() - cpu, time.time() - wall
    tok.save(out)
    print(json.dumps({"wall": wall, "cpu": cpu, "rss_before_mb": rss0,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run_child(trainer: str, threads: int, vocab: int, texts_file: Path, out: Path) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    cp = subprocess.run([sys.executable, __file__, "--child", trainer, str(threads), str(vocab),
                         str(texts_file), str(out)], capture_output=True, text=True, env=env,
                        cwd=ROOT)
    if cp.returncode != 0:
        raise RuntimeError(f"{trainer} x{threads}: {cp.stderr[-2000:]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def measure(texts: list[str], sizes: list[float], vocab: int, repeat: int,
            threads: int = 2, log=print) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from algorithms.bpe_trainer import WORD_CHUNK, measure_compression_fast, vocab_difference

    train, held = split_like_the_stage(texts)
    results = []
    with tempfile.TemporaryDirectory() as td:
        # the compiled kernels are built once per checkout and CPU target (numba caches
        # them beside the module, about 20 s): build them before anything is timed, on
        # text of more than two counting chunks, so that uniting the chunks' words
        # (unite_words) is compiled too
        warm = Path(td) / "warm.parquet"
        pq.write_table(pa.table({"text": pa.array(prefix(train, 2.5 * WORD_CHUNK / 1e6),
                                                  pa.string())}), warm)
        for n in sorted({1, threads}):   # one thread and several take different kernels
            run_child("fast", n, 300, warm, Path(td) / "warm.json")
        for mb in sizes:
            part = prefix(train, mb)
            real_mb = sum(len(t.encode("utf-8")) for t in part) / 1e6
            f = Path(td) / f"train{mb:g}.parquet"
            pq.write_table(pa.table({"text": pa.array(part, pa.string())}), f)
            runs = {"hf": [], "fast": [], "fast1": [], "rustbpe": []}
            for rep in range(repeat):
                for name, trainer, n in (("hf", "hf", threads), ("fast", "fast", threads),
                                         ("fast1", "fast", 1), ("rustbpe", "rustbpe", threads)):
                    r = run_child(trainer, n, vocab, f, Path(td) / f"{name}{mb:g}.json")
                    runs[name].append(r)
                    log(f"  {real_mb:.1f} MB, {name} ({n} threads), run {rep + 1}: "
                        f"{r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
                        f"peak RSS {r['peak_rss_mb']:.0f} MB")
            files = {k: Path(td) / f"{k}{mb:g}.json" for k in ("hf", "fast", "rustbpe")}
            toks = {k: Tokenizer.from_file(str(f)) for k, f in files.items()}
            comp = {k: measure_compression_fast(t, held) for k, t in toks.items()}
            med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "peak_rss_mb")}
                   for k, v in runs.items()}
            results.append({
                "mb": round(real_mb, 1), "docs": len(part), "runs": runs, "median": med,
                "cpu_ratio": med["hf"]["cpu"] / med["fast"]["cpu"],
                "wall_ratio": med["hf"]["wall"] / med["fast"]["wall"],
                "rustbpe_cpu_ratio": med["hf"]["cpu"] / med["rustbpe"]["cpu"],
                "rustbpe_wall_ratio": med["hf"]["wall"] / med["rustbpe"]["wall"],
                "identical": files["fast"].read_bytes() == files["hf"].read_bytes(),
                "thread_gain": med["fast1"]["wall"] / med["fast"]["wall"],
                "bytes_per_token": {k: {lang: comp[k][lang]["bytes_per_token"] for lang in ("en", "zh")}
                                    for k in comp},
                "heldout_docs": {lang: comp["hf"][lang]["docs"] for lang in ("en", "zh")},
                "vocab_difference": vocab_difference(toks["fast"], toks["hf"]),
                "rustbpe_vocab_difference": vocab_difference(toks["rustbpe"], toks["hf"]),
            })
    return {"sizes": results, "cpu_flags": cpu_flags(), "vocab_size": vocab, "threads": threads, "repeat": repeat,
            "heldout_mb": round(sum(len(t.encode()) for t in held.column("text").to_pylist()) / 1e6, 2)}


def rows(res: dict) -> list[dict]:
    """run_all's rows: MB/s per core (CPU), the ratios against the targets."""
    out = []
    for s in res["sizes"]:
        hf, fast = s["median"]["hf"], s["median"]["fast"]
        quality = all(abs(s["bytes_per_token"]["fast"][k] / s["bytes_per_token"]["hf"][k] - 1) <= QUALITY
                      for k in ("en", "zh") if s["bytes_per_token"]["hf"][k])
        out.append({"name": f"BpeTrainer (train_hf), {s['mb']} MB", "mb_per_s_per_core":
                    round(s["mb"] / hf["cpu"], 3), "ratio": None, "target": None, "ok": None,
                    "wall_s": round(hf["wall"], 2), "cpu_s": round(hf["cpu"], 2)})
        out.append({"name": f"compiled (train_fast), {s['mb']} MB, CPU s", "mb_per_s_per_core":
                    round(s["mb"] / fast["cpu"], 3), "ratio": round(s["cpu_ratio"], 2),
                    "target": f">= {TARGET}", "ok": s["cpu_ratio"] >= TARGET and quality
                    and s["identical"],
                    "wall_s": round(fast["wall"], 2), "cpu_s": round(fast["cpu"], 2)})
        out.append({"name": f"compiled (train_fast), {s['mb']} MB, wall s",   # MB/s per thread
                    "mb_per_s_per_core": round(s["mb"] / fast["wall"] / res["threads"], 3),
                    "ratio": round(s["wall_ratio"], 2), "target": f">= {TARGET}",
                    "ok": s["wall_ratio"] >= TARGET})
        rb = s["median"]["rustbpe"]
        out.append({"name": f"rustbpe (train_rustbpe, not the default), {s['mb']} MB, CPU s",
                    "mb_per_s_per_core": round(s["mb"] / rb["cpu"], 3),
                    "ratio": round(s["rustbpe_cpu_ratio"], 2), "target": None, "ok": None,
                    "wall_s": round(rb["wall"], 2), "cpu_s": round(rb["cpu"], 2)})
    return out


# the stage's functions whose time the breakdown reports (cProfile of the driver process)
STAGE_FUNCTIONS = ["shard_text_bytes", "distinct_words", "check_memory", "iter_sample",
                   "read_heldout", "verify", "check_round_trip", "ordinary_tokenizer",
                   "measure_compression", "write_outputs", "save_report", "commit", "to_hf"]


def stage_breakdown(texts: list[str], mb: float, trainer: str, vocab: int = 32000,
                    workers: int = 2) -> dict:
    """Where `python train_tokenizer.py` spends its time on a sample of about mb MB:
    the whole process's wall time, the stage's phase timings (manifest), the time before
    the stage starts (interpreter, imports), and the driver's time in the stage's own
    functions (cProfile, cumulative)."""
    import pstats

    from bench_tokenizer_memory import make_input

    with tempfile.TemporaryDirectory() as td:
        raw = make_input(texts, Path(td) / "in")
        out, prof = Path(td) / "out", Path(td) / "prof"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        base = [str(ROOT / "train_tokenizer.py"), "--input", str(raw), "--vocab-size", str(vocab),
                "--sample-ratio", "1", "--min-bytes", "0", "--max-bytes", str(int(mb * 1e6)),
                "--workers", str(workers), "--engine", ENGINE[trainer], "--memory-budget", "100TB"]
        t = time.time()
        cp = subprocess.run([sys.executable, *base, "--output", str(out)], env=env, cwd=ROOT,
                            capture_output=True, text=True)
        wall = time.time() - t
        if cp.returncode:
            raise RuntimeError(cp.stderr[-2000:])
        m = json.loads((out / "manifest.json").read_text())
        # the stage's main() under cProfile, imported as a module (its workers find their
        # task functions by module name)
        code = ("import cProfile, sys, train_tokenizer as tt; "
                "cProfile.run('tt.main(sys.argv[2:])', sys.argv[1])")
        cp = subprocess.run([sys.executable, "-c", code, str(prof), *base[1:], "--output",
                             str(out) + "p"], env=env, cwd=ROOT, capture_output=True, text=True)
        if cp.returncode:
            raise RuntimeError(cp.stderr[-2000:])
        t = time.time()
        subprocess.run([sys.executable, "-c", "import train_tokenizer, algorithms.bpe_trainer, "
                        "tokenizers, rustbpe, pyarrow.parquet"], env=env, cwd=ROOT, check=True)
        imports = time.time() - t
        stats = pstats.Stats(str(prof)).stats
        funcs = {}
        for (file, line, name), (cc, nc, tt_, ct, callers) in stats.items():
            if name in STAGE_FUNCTIONS and any(
                    part in file for part in ("train_tokenizer", "bpe_trainer", "stage",
                                              "tokenizer", "sample_files")):
                funcs[name] = max(funcs.get(name, 0.0), ct)
    return {"trainer": trainer, "sample_mb": round(m["sample"]["sample_bytes"] / 1e6, 1),
            "heldout_mb": round(m["sample"]["heldout_bytes"] / 1e6, 2),
            "wall_s": round(wall, 2), "phases": m["timings"],
            "cpu_s": round(m["resources"]["driver_cpu_s"] + m["resources"]["worker_cpu_s"], 2),
            "before_stage_s": round(wall - m["timings"]["total"], 2),
            "imports_s": round(imports, 2), "functions_s": {k: round(v, 2) for k, v in funcs.items()}}


def run(corpus_texts: list[str], quick: bool = False) -> dict:
    """For bench/run_all.py: 37 and 200 MB (its default corpus is 250 MB), 32000 ids."""
    if quick:
        res = measure(corpus_texts, [1000], 1000, 1, log=lambda *a: None)
    else:
        total = sum(len(t.encode("utf-8")) for t in corpus_texts) / 1e6
        sizes = [s for s in (37, 200) if s + HELDOUT_BYTES / 1e6 <= total] or [total * 0.9]
        res = measure(corpus_texts, sizes, 32000, 2, log=lambda *a: None)
    return {"rows": rows(res), **res}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="37,200", help="training sample sizes, MB (default 37,200)")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--repeat", type=int, default=2, help="runs of each trainer (default 2)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--stage-mb", type=float,
                   help="instead: where the whole train_tokenizer.py stage spends its time on a "
                        "sample of this many MB, per trainer")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        trainer, threads, vocab, texts_file, out = args.child
        child(trainer, int(threads), int(vocab), texts_file, out)
        return 0

    from common import corpus_texts, cpu_model

    from pipeline.tables import table

    if args.stage_mb:
        texts = corpus_texts(args.stage_mb * 1.02 + HELDOUT_BYTES / 1e6 * 1.3)
        print(f"CPU: {cpu_model()} ({cpu_flags()}); the stage on {args.stage_mb:g} MB, "
              f"{args.threads} workers", flush=True)
        res = [stage_breakdown(texts, args.stage_mb, t, args.vocab_size, args.threads)
               for t in ("fast", "hf")]
        for r in res:
            print(json.dumps(r))
        # the tutorial's loop (4.7: BpeTrainer.train_from_iterator, then save) on the same
        # text: the training documents as the stage draws them, up to the sample's size
        import pyarrow as pa
        import pyarrow.parquet as pq
        import statistics

        train, _ = split_like_the_stage(texts)
        part = prefix(train, res[0]["sample_mb"])
        loops = []
        with tempfile.TemporaryDirectory() as td:
            f = Path(td) / "sample.parquet"
            pq.write_table(pa.table({"text": pa.array(part, pa.string())}), f)
            for _ in range(max(1, args.repeat)):
                loops.append(run_child("hf", args.threads, args.vocab_size, f, Path(td) / "t.json"))
        loop_cpu = statistics.median(r["cpu"] for r in loops)
        loop_wall = statistics.median(r["wall"] for r in loops)
        print(f"the tutorial's loop alone (BpeTrainer, {args.threads} threads) on "
              f"{sum(len(t.encode('utf-8')) for t in part) / 1e6:.1f} MB: {loop_cpu:.2f} CPU s, "
              f"{loop_wall:.2f} s wall (median of {len(loops)}); the whole stage (--engine fast): "
              f"{res[0]['cpu_s']:.2f} CPU s, {res[0]['wall_s']:.2f} s wall: "
              f"{loop_cpu / res[0]['cpu_s']:.2f}x in CPU, {loop_wall / res[0]['wall_s']:.2f}x in wall")
        res.append({"tutorial_loop": {"cpu_s": loop_cpu, "wall_s": loop_wall}})
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        return 0
    sizes = [float(x) for x in args.sizes.split(",") if x]
    texts = corpus_texts(max(sizes) * 1.02 + HELDOUT_BYTES / 1e6 * 1.3)
    print(f"CPU: {cpu_model()} ({cpu_flags()}); {os.cpu_count()} cores; vocabulary {args.vocab_size}, "
          f"min_frequency 2, {args.threads} threads, {args.repeat} runs each", flush=True)
    res = measure(texts, sizes, args.vocab_size, args.repeat, args.threads,
                  log=lambda m: print(m, flush=True))
    print(f"held out: {res['heldout_mb']} MB "
          f"({res['sizes'][0]['heldout_docs']['en']} English, "
          f"{res['sizes'][0]['heldout_docs']['zh']} Chinese documents)")
    head = ["sample", "trainer", "wall s", "CPU s", "peak RSS MB", "bytes/token en", "bytes/token zh"]
    body = []
    for s in res["sizes"]:
        for k, name in (("hf", f"BpeTrainer, {args.threads} threads"),
                        ("fast", f"compiled, {args.threads} threads"), ("fast1", "compiled, 1 thread"),
                        ("rustbpe", f"rustbpe, {args.threads} threads")):
            m = s["median"][k]
            bpt = s["bytes_per_token"].get(k, {})
            body.append([f"{s['mb']} MB", name, f"{m['wall']:.1f}", f"{m['cpu']:.1f}",
                         f"{m['peak_rss_mb']:.0f}", f"{bpt['en']:.4f}" if bpt else "",
                         f"{bpt['zh']:.4f}" if bpt else ""])
    print(table(head, body))
    print(table(["sample", "trainer", "CPU s ratio", "wall s ratio", "1 -> 2 threads (wall)",
                 "tokenizer.json", "bytes/token en vs hf", "zh", "vocab difference"],
                [[f"{s['mb']} MB", name, f"{s[pre + 'cpu_ratio']:.2f}",
                  f"{s[pre + 'wall_ratio']:.2f}",
                  f"{s['thread_gain']:.2f}x" if not pre else "",
                  ("identical" if s["identical"] else "DIFFERS") if not pre else "",
                  f"{s['bytes_per_token'][k]['en'] / s['bytes_per_token']['hf']['en'] - 1:+.3%}",
                  f"{s['bytes_per_token'][k]['zh'] / s['bytes_per_token']['hf']['zh'] - 1:+.3%}",
                  f"{s[pre + 'vocab_difference']} of {args.vocab_size}"]
                 for s in res["sizes"]
                 for k, name, pre in (("fast", "compiled", ""), ("rustbpe", "rustbpe", "rustbpe_"))]))
    ok = [r["ok"] for r in rows(res) if r["ok"] is not None]
    print(f"target: the compiled trainer >= {TARGET}x BpeTrainer in CPU s and in wall s, "
          f"bytes/token within {QUALITY:.1%}: {'met' if all(ok) else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_trainer.py", "requirements-bench.txt")
    sys.exit(main())

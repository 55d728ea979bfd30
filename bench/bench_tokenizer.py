"""Benchmark: train_tokenizer.py's path against the tutorial's 4.7 training loop.

    python bench/bench_tokenizer.py              # 50 MB corpus from the bundled sample

Both sides train the same byte-level BPE (32000 ids, 256-byte alphabet, the special
tokens) on the same documents, written as parquet shards, in this process with one
training thread (RAYON_NUM_THREADS=1, set before tokenizers starts its pool):

- reference: section 4.7 verbatim in spirit: `datasets.load_dataset("parquet",
  streaming=True)`, every row through Python, `i % int(1 / sample_ratio)` to pick rows
  (sample_ratio 1.0 here so both train on all the text), batches of 1000, BpeTrainer;
- ours: what train_tokenizer.py does: per shard, the text column read with pyarrow and
  the rows chosen in numpy (sample_unit, no held-out part so both train on the same
  bytes), the sample streamed back in batches, the compiled trainer, then the checks of
  4.7 step 5 and the compression measurement that the stage runs before saving.

The stage trains with the compiled BpeTrainer (algorithms/bpe_trainer.py: train_fast, the
same tokenizer.json as BpeTrainer, one thread here like the reference) and counts the
compression with the compiled encoder. The target: ours at least 3x the reference's
MB/s per core (CPU seconds on the same text, sampling and checks included). Also reported:
BpeTrainer alone on the texts already in memory (the floor for anything built on it), and
drawing a 5% sample both ways (MB of corpus per CPU-second): there the stage's design,
not BpeTrainer, decides the speed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core, set before tokenizers is used

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

TARGET_RATIO = 3.0   # issue: the whole stage at least 3x the tutorial's loop in CPU s
SHARD_ROWS = 2000


def write_shards(texts: list[str], folder: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for i in range(0, len(texts), SHARD_ROWS):
        p = folder / f"part-{i // SHARD_ROWS:05d}.parquet"
        chunk = texts[i:i + SHARD_ROWS]
        pq.write_table(pa.table({"id": [str(k) for k in range(i, i + len(chunk))],
                                 "text": chunk}), p, compression="zstd")
        paths.append(str(p))
    return paths


def corpus_iter(paths, sample_ratio=1.0, batch_size=1000):
    """Tutorial 4.7 step 2, verbatim."""
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=paths, split="train", streaming=True)
    buf = []
    for i, row in enumerate(ds):
        if i % int(1 / sample_ratio) != 0:
            continue
        buf.append(row["text"])
        if len(buf) >= batch_size:
            yield buf
            buf = []
    if buf:
        yield buf


def reference(paths: list[str], vocab: int):
    """Tutorial 4.7: datasets streaming, every row through Python, then BpeTrainer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from algorithms.tokenizer_file import SPECIAL_TOKENS

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus_iter(paths), trainer=trainer)
    return tokenizer


def ours(paths: list[str], vocab: int, staging: Path):
    """train_tokenizer.py's functions, in the order the stage runs them."""
    import pyarrow as pa

    from algorithms import bpe_trainer, tokenizer_checks
    from pipeline import sample_files

    import pyarrow.compute as pc
    from pipeline.shards import open_shard
    from pipeline.units import plan_units

    units = [u.to_dict() for u in plan_units([Path(p) for p in paths])]
    sizes = [int(pc.sum(pc.binary_length(open_shard(p).read(columns=["text"])
                                               .column("text"))).as_py()) for p in paths]
    draw_sample(units, staging, 1.0)
    tok = bpe_trainer.train_fast(sample_files.iter_sample(staging, len(units)), vocab,
                                 min_frequency=2, threads=1)
    real = next(sample_files.iter_sample(staging, len(units),
                                             tokenizer_checks.REAL_DOCS_CHECKED), [])
    tokenizer_checks.verify(tok, vocab, sum(sizes), real)
    bpe_trainer.measure_compression_fast(tok, pa.table({"text": real, "lang": ["en"] * len(real)}))
    return tok


def draw_sample(units: list[dict], staging: Path, ratio: float) -> None:
    """train_tokenizer.py's sample tasks one after another: the loop of its sample_unit."""
    from algorithms import tokenizer_sample
    from pipeline.sample_files import UnitSample
    from pipeline.units import read_unit

    for rank, unit in enumerate(units):
        sample = UnitSample(staging, rank, tokenizer_sample.share_cuts(0.0, ratio), 0, 100_000)
        for batch in read_unit(unit, columns=["id", "text"]):
            sample.add(batch)
        sample.close()


def sample_reference(paths: list[str], ratio: float) -> int:
    """Drawing a `ratio` sample the tutorial's way: every row streamed through Python."""
    return sum(len(b) for b in corpus_iter(paths, sample_ratio=ratio))


def sample_ours(paths: list[str], ratio: float, staging: Path) -> int:
    """Drawing it the stage's way: text column in Arrow, rows chosen in numpy."""
    from pipeline import sample_files
    from pipeline.units import plan_units

    units = [u.to_dict() for u in plan_units([Path(p) for p in paths])]
    draw_sample(units, staging, ratio)
    return sum(len(b) for b in sample_files.iter_sample(staging, len(units)))


def floor(texts: list[str], vocab: int):
    """BpeTrainer alone, on texts already in memory."""
    from algorithms import bpe_trainer

    return bpe_trainer.train_hf((texts[i:i + 1000] for i in range(0, len(texts), 1000)), vocab, 0)


def run(corpus_texts: list[str], quick: bool = False) -> dict:
    vocab = 1000 if quick else 32000
    mb = sum(len(t.encode("utf-8")) for t in corpus_texts) / 1e6
    with tempfile.TemporaryDirectory() as td:
        shards = Path(td) / "shards"
        shards.mkdir()
        paths = write_shards(corpus_texts, shards)
        timings = {}
        for name, fn in (("tutorial 4.7 (datasets streaming + BpeTrainer)", lambda: reference(paths, vocab)),
                         ("train_tokenizer.py (pyarrow sample + compiled BpeTrainer + checks)",
                          lambda: ours(paths, vocab, Path(td) / "staging")),
                         ("BpeTrainer alone, texts in memory", lambda: floor(corpus_texts, vocab)),
                         ("sampling 5%: tutorial corpus_iter (every row through Python)",
                          lambda: sample_reference(paths, 0.05)),
                         ("sampling 5%: train_tokenizer.py sample_unit (Arrow + numpy)",
                          lambda: sample_ours(paths, 0.05, Path(td) / "staging5"))):
            t = time.process_time()
            w = time.time()
            fn()
            timings[name] = (time.process_time() - t, time.time() - w)
    names = list(timings)

    def row(i: int, ref: int | None, target: float | None) -> dict:
        cpu, wall = timings[names[i]]
        rate = mb / max(cpu, 1e-9)
        ratio = None if ref is None else round(rate * max(timings[names[ref]][0], 1e-9) / mb, 3)
        r = {"name": names[i], "mb_per_s_per_core": round(rate, 3), "wall_s": round(wall, 2),
             "cpu_s": round(cpu, 2), "ratio": ratio, "target": None, "ok": None}
        if target is not None:
            r.update(target=f">= {target}", ok=ratio >= target, ours=True)
        return r

    rows = [row(0, None, None), row(1, 0, TARGET_RATIO), row(2, 0, None),
            row(3, None, None), row(4, 3, None)]
    return {"rows": rows, "vocab_size": vocab, "corpus_mb": round(mb, 2),
            "rayon_threads": os.environ.get("RAYON_NUM_THREADS")}


def main(argv: list[str] | None = None) -> int:
    from common import corpus_texts

    from pipeline.tables import table

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=50.0)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    res = run(corpus_texts(args.mb, quick=getattr(args, "quick", False)), quick=args.quick)
    print(f"corpus {res['corpus_mb']} MB, vocab {res['vocab_size']}, "
          f"RAYON_NUM_THREADS={res['rayon_threads']}")
    print(table(["implementation", "MB/s per core", "cpu s", "wall s", "ratio", "target", "ok"],
                [[r["name"], r["mb_per_s_per_core"], r["cpu_s"], r["wall_s"],
                  "" if r["ratio"] is None else r["ratio"], r["target"] or "",
                  "" if r["ok"] is None else r["ok"]] for r in res["rows"]]))
    return 0


if __name__ == "__main__":
    from pipeline.requirements import require

    require("bench/bench_tokenizer.py", "requirements-bench.txt")
    sys.exit(main())

"""Benchmark: does train_tokenizer.py's memory estimate hold? (Its --memory-budget check.)

    python bench/bench_tokenizer_memory.py                 # the benchmark corpus
    python bench/bench_tokenizer_memory.py --chinese-text news.txt reviews.txt
    python bench/bench_tokenizer_memory.py --trainers fast --zh-mb 12,25,50 --en-mb 50,200

BpeTrainer keeps every distinct word of its sample, and the ByteLevel pre-tokenizer
makes each run of Chinese characters one word, so the trainer's memory follows the
bytes of the distinct words (algorithms.trainer_memory.trainer_memory, counted by the
sample tasks). This runs train_tokenizer.py as a user does (a subprocess, 32000 ids,
default threads), once with each trainer (--engine fast: BpeTrainer's algorithm
compiled, whose estimate is algorithms.trainer_memory.fast_trainer_memory; --engine
reference: BpeTrainer), on samples of one language at a time and reads, from each
manifest, the memory the stage expected and the peak it reached:

- the benchmark corpus's Chinese documents (12, 25 and 50 MB) and English documents
  (50 to 400 MB);
- given Chinese text files (--chinese-text: one document per line; a line of "word/tag"
  pairs, as in a tagged corpus, has its tags and spaces removed), at half and all of
  their size. The README names the files it used.

The target: no peak above the estimate, by more than 10% for BpeTrainer's (an estimate
that errs high only stops a run that would have fitted, and says so; one that errs low
lets the system kill the stage); the compiled trainer's estimate is set to err high (at
most 1.0).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from common import CORPUS, cpu_model, run_script  # noqa: E402

TARGET = {"hf": 1.10, "fast": 1.00}   # peak / expected, at most, per trainer
SHARD_ROWS = 5000
ENGINE = {"fast": "fast", "hf": "reference"}   # a trainer -> the train_tokenizer.py engine that runs it
TAG = re.compile(r"/[a-zA-Z]+\b")


def split_by_language(corpus: Path, zh_mb: float, en_mb: float) -> dict[str, list[str]]:
    """The corpus's first zh_mb MB of Chinese and en_mb MB of English documents, told
    apart as train_tokenizer.py tells them (more Chinese characters than ASCII letters)."""
    import pyarrow.parquet as pq

    from algorithms import tokenizer_sample

    want = {"zh": zh_mb * 1e6, "en": en_mb * 1e6}
    got = {"zh": [], "en": []}
    size = {"zh": 0, "en": 0}
    files = sorted(corpus.glob("*.parquet"))
    if not files:
        raise SystemExit(f"{corpus} holds no parquet shards: run `make bench-corpus`")
    for f in files:
        col = pq.read_table(f, columns=["text"]).column("text")
        langs = tokenizer_sample.doc_languages(*tokenizer_sample.script_counts(col))
        for text, lang in zip(col.to_pylist(), langs):
            if lang in got and size[lang] < want[lang] and text:
                got[lang].append(text)
                size[lang] += len(text.encode("utf-8"))
        if all(size[k] >= want[k] for k in want):
            break
    return got


def read_lines(paths: list[str]) -> list[str]:
    """Documents from plain-text files, a line each; tags of a tagged corpus removed."""
    docs = []
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8", errors="replace").splitlines():
            if "/" in line and TAG.search(line):
                line = "".join(TAG.sub("", line).split())
            if line.strip():
                docs.append(line.strip())
    return docs


def make_input(texts: list[str], folder: Path) -> Path:
    """texts as parquet shards, converted by download_data.py into a stage folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = folder / "src"
    src.mkdir(parents=True)
    for i in range(0, len(texts), SHARD_ROWS):
        chunk = texts[i:i + SHARD_ROWS]
        pq.write_table(pa.table({"id": [f"d{k}" for k in range(i, i + len(chunk))],
                                 "text": chunk}), src / f"part-{i // SHARD_ROWS:05d}.parquet")
    raw = folder / "raw"
    run_script("download_data.py", "--input", str(src / "*.parquet"), "--output", raw)
    return raw


def measure(raw: Path, out: Path, max_bytes: int, vocab: int, trainer: str = "hf") -> dict:
    """Train on at most max_bytes of raw; the manifest's expected and peak memory."""
    run_script("train_tokenizer.py", "--input", raw, "--output", out, "--vocab-size", vocab,
               "--sample-ratio", 1, "--min-bytes", 0, "--max-bytes", max_bytes,
               "--memory-budget", "100TB", "--engine", ENGINE[trainer])
    s = json.loads((out / "manifest.json").read_text())["sample"]
    return {"trainer": trainer, "sample_mb": s["sample_bytes"] / 1e6, "han_chars": s["han_chars"],
            "words": s["distinct_words"], "word_mb": s["distinct_word_bytes"] / 1e6,
            "expected_mb": s["trainer_memory_expected_mb"],
            "peak_mb": s["trainer_memory_peak_mb"],
            "ratio": s["trainer_memory_peak_mb"] / s["trainer_memory_expected_mb"]}


def run(cases: list[tuple[str, list[str], list[float]]], vocab: int,
        trainers: tuple[str, ...] = ("fast", "hf")) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for name, texts, sizes in cases:
            raw = make_input(texts, Path(td) / name)
            for mb in sizes:
                for trainer in trainers:
                    r = measure(raw, Path(td) / name / f"tok{mb:g}{trainer}", int(mb * 1e6),
                                vocab, trainer)
                    rows.append({"text": name, **r, "ok": r["ratio"] <= TARGET[trainer]})
                    print(f"  {name} {r['sample_mb']:.1f} MB, {trainer}: expected "
                          f"{r['expected_mb']:.0f} MB, peak {r['peak_mb']:.0f} MB", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--zh-mb", default="12,25,50",
                   help="Chinese sample sizes, MB (default 12,25,50)")
    p.add_argument("--en-mb", default="50,100,200,400",
                   help="English sample sizes, MB (default 50,100,200,400)")
    p.add_argument("--chinese-text", nargs="*", default=[],
                   help="plain-text files of Chinese documents the estimate was not fitted on")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--trainers", default="fast,hf",
                   help="trainers to measure: fast (--engine fast), hf (--engine "
                        "reference) (default fast,hf)")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    zh = [float(x) for x in args.zh_mb.split(",") if x]
    en = [float(x) for x in args.en_mb.split(",") if x]
    docs = split_by_language(Path(args.corpus), max(zh, default=0), max(en, default=0))
    cases = [("benchmark corpus, Chinese", docs["zh"], zh),
             ("benchmark corpus, English", docs["en"], en)]
    if args.chinese_text:
        extra = read_lines(args.chinese_text)
        mb = sum(len(t.encode("utf-8")) for t in extra) / 1e6
        cases.append((f"given Chinese text ({len(args.chinese_text)} files)", extra, [mb / 2, mb]))
    print(f"train_tokenizer.py memory, expected against peak ({cpu_model()}):", flush=True)
    rows = run([c for c in cases if c[2]], args.vocab_size,
               tuple(t for t in args.trainers.split(",") if t))
    from pipeline.tables import table

    print(table(["text", "trainer", "sample MB", "Chinese chars", "distinct words", "their MB",
                 "expected MB", "peak MB", "peak/expected", "ok"],
                [[r["text"], r["trainer"], f"{r['sample_mb']:.1f}", f"{r['han_chars']:,}", f"{r['words']:,}",
                  f"{r['word_mb']:.1f}", f"{r['expected_mb']:.0f}", f"{r['peak_mb']:.0f}",
                  f"{r['ratio']:.2f}", "ok" if r["ok"] else "OVER"] for r in rows]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("target: every peak at most " + ", ".join(f"{v:.2f} x the estimate ({k})"
                                                    for k, v in TARGET.items()))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""train_tokenizer.py's counts and report: the sample's counts and their checks, the text
bytes of the input, the trainer's memory checked before it starts, and after training the
output files (tokenizer.json, tokenizer_config.json, the held-out text), the stats table
and report/train_tokenizer_stats.{json,md}."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from algorithms import tokenizer_checks
from algorithms.trainer_memory import bytes_that_fit, trainer_memory_estimate

from .errors import StageError
from .manifest import write_json
from .progress import available_memory
from .sample_files import distinct_words
from .shards import file_record
from .stage import Output
from .tables import human_bytes, markdown_table, parse_size, pct, save_report, table

HELDOUT = "report/heldout.parquet"   # the held-out text, beside the report
PAIR_COUNT_LIMIT = 2**31 - 1   # BpeTrainer's i32 pair counts (tokenizers issue 2058)


def sample_counts(run, results: list[dict], total: int, sample_target: int) -> dict:
    """The sample tasks' counts summed, printed in one line, and checked: a sample with no
    document to train on, or (for BpeTrainer) one whose pair counts could wrap, stops the
    run with one line. The distinct words (what the trainer's memory follows) added."""
    args = run.args
    s = {k: sum(r.get(k, 0) for r in results) for k in set().union(*results)} if results else {}
    mix = s["han_chars"] + s["ascii_letters"]
    print(f"training sample: {s['sample_docs']:,} documents, {human_bytes(s['sample_bytes'])} "
          f"({pct(s['sample_bytes'], total)} of {human_bytes(total)}); mix: Chinese characters "
          f"{pct(s['han_chars'], mix)}, ASCII letters {pct(s['ascii_letters'], mix)}; "
          f"{s['zh_docs']:,} Chinese / {s['en_docs']:,} English documents", flush=True)
    if s["null_docs"]:
        print(f"note: {s['null_docs']:,} documents have no text (null): counted, never sampled",
              file=sys.stderr)
    if s["sample_docs"] == 0 and s["heldout_docs"] == s["docs_in"] - s["null_docs"]:
        raise StageError(f"{run.input}: all {s['heldout_docs']:,} non-empty document(s) fell "
                         "in the held-out share, none is left to train on; rerun with "
                         "--heldout-bytes 0 or another --seed")
    if s["sample_docs"] == 0:   # a share too small to draw one document
        raise StageError(f"{run.input}: no documents to train on: the sample's share of "
                         f"{sample_target:,} of the corpus's {total:,} text bytes drew none "
                         f"(--sample-ratio {args.sample_ratio}, --min-bytes {args.min_bytes:,}, "
                         f"--max-bytes {args.max_bytes:,}); raise --max-bytes or --min-bytes")
    if args.engine == "reference" and s["sample_bytes"] > PAIR_COUNT_LIMIT:
        raise StageError(f"the sample drawn is {s['sample_bytes']:,} bytes, above "
                         f"{PAIR_COUNT_LIMIT:,}: BpeTrainer's 32-bit pair counts could wrap "
                         "(tokenizers issue 2058); lower --max-bytes by a few percent")
    s["distinct_words"], s["distinct_word_bytes"] = distinct_words(run.staging, len(run.units))
    return s


def stage_output(run, tok, heldout: pa.Table, s: dict, need: int, verification: dict,
                 comp: dict, hf_diff: int | None) -> Output:
    """The tokenizer and the held-out text written into the staging folder, the stats
    table and the report, and what the manifest records."""
    args = run.args
    write_outputs(run.staging, tok, heldout, args.vocab_size)
    rows = stats_rows(s, verification, comp)
    rate = s["sample_bytes"] / 1e6 / max(s["train_seconds"], 1e-9)
    rows.append(["training time", f"{s['train_seconds']:.1f} s ({rate:.2f} MB/s, "
                                  f"{args.workers} threads, engine {args.engine})"])
    rows.append(["trainer memory (expected / peak)",
                 f"{human_bytes(need)} / {human_bytes(s['peak_mb'] * 2**20)}"])
    rows.append(["tokens that differ from BpeTrainer's vocabulary", differ_text(args, hf_diff)])
    counts = {"docs_in": s["docs_in"], "bytes_in": s["bytes_in"],
              "vocab_size": verification["vocab_size"], "max_id": verification["max_id"]}
    mix = s["han_chars"] + s["ascii_letters"]
    sample = {k: s[k] for k in s if k not in ("docs_in", "bytes_in", "train_seconds", "peak_mb")}
    sample["word_count_cpu_s"] = round(s.get("word_count_cpu_s", 0.0), 3)
    sample["han_share"] = round(s["han_chars"] / mix, 4) if mix else None
    sample["ascii_share"] = round(s["ascii_letters"] / mix, 4) if mix else None
    sample["trainer_memory_expected_mb"] = round(need / 2**20, 1)   # MB as in "resources"
    sample["trainer_memory_peak_mb"] = s["peak_mb"]
    bpetrainer = bpetrainer_difference(args, hf_diff)
    save_report(run.staging / "report", "train_tokenizer_stats",
                {"counts": counts, "sample": sample, "verification": verification,
                 "compression": comp, "train_seconds": round(s["train_seconds"], 3),
                 "engine": args.engine, "bpetrainer": bpetrainer},
                "# train_tokenizer\n\n" + markdown_table(["train_tokenizer", "value"], rows))
    # the held-out text is listed too: compare_tokenizers.py and verify.py read it, so an
    # output without it (or with it damaged) is not current
    files = [file_record(run.staging / "tokenizer.json"),
             file_record(run.staging / "tokenizer_config.json"),
             file_record(run.staging / HELDOUT, name=HELDOUT)]
    return Output(files, counts, extra={"sample": sample, "verification": verification,
                                        "compression": comp, "bpetrainer": bpetrainer},
                  summary=[table(["train_tokenizer", "value"], rows, right=set()),
                           f"wrote {run.output}/tokenizer.json, {run.output}/manifest.json "
                           f"and {run.output}/report/"])


def bpetrainer_difference(args, measured: int | None) -> dict:
    """How this tokenizer's vocabulary relates to BpeTrainer's on the same sample."""
    if args.engine == "reference":
        return {"differ": 0, "how": "trained by BpeTrainer itself (--engine reference)"}
    if measured is not None:
        return {"differ": measured, "how": "measured: BpeTrainer trained on the same sample "
                                           "(--compare-hf)"}
    return {"differ": 0, "how": "the compiled trainer runs BpeTrainer's algorithm and writes "
                                "its tokenizer.json byte for byte (tests/test_bpe_trainer.py, "
                                "bench/bench_trainer.py); --compare-hf measures it on this "
                                "sample"}


def differ_text(args, measured: int | None) -> str:
    d = bpetrainer_difference(args, measured)
    return f"{d['differ']:,} ({d['how']})"


def check_memory(s: dict, args) -> int:
    """Print the expected peak memory of training on the sample s; stop (StageError, one
    line) when it is above --memory-budget, naming the --max-bytes that would fit. Returns
    it."""
    budget = (available_memory() if args.memory_budget == "auto"
              else parse_size(args.memory_budget, "--memory-budget"))

    base, need = trainer_memory_estimate("fast" if args.engine == "fast" else "hf",
                                         s["distinct_words"],
                                         s["distinct_word_bytes"], s["sample_bytes"])
    where = (f"--memory-budget {human_bytes(budget)}" if args.memory_budget != "auto"
             else f"{human_bytes(budget)} available" if budget else "available memory unknown")
    words = (f"{s['distinct_words']:,} distinct words, "
             f"{human_bytes(s['distinct_word_bytes'])} of them")
    print(f"trainer memory: about {human_bytes(need)} expected ({words}); {where}", flush=True)
    if budget is None or need <= budget:
        return need
    fit = bytes_that_fit(need, budget, s["sample_bytes"], base)
    advice = (f"lower --max-bytes to {fit:,}" + (" (and --min-bytes to at most that)"
                                                  if args.min_bytes > fit else "")
              if fit else "no sample fits")
    raise StageError(
        f"training on this sample ({human_bytes(s['sample_bytes'])}: {words}) needs about "
        f"{human_bytes(need)} of memory, more than {where}: the trainer keeps every distinct "
        f"word, and each run of Chinese characters is one; {advice}, or raise --memory-budget")


def stats_rows(s: dict, verification: dict, comp: dict) -> list[list]:
    mix = s["han_chars"] + s["ascii_letters"]
    rows = [
        ["corpus documents", s["docs_in"]],
        *([["documents without text (null), never sampled", s["null_docs"]]]
          if s.get("null_docs") else []),
        ["corpus text bytes", human_bytes(s["bytes_in"])],
        ["held out (docs / bytes)", f"{s['heldout_docs']:,} / {human_bytes(s['heldout_bytes'])}"
                                    + (f" ({s['heldout_cropped_docs']:,} cropped)"
                                       if s.get("heldout_cropped_docs") else "")],
        ["sample documents", s["sample_docs"]],
        ["sample text bytes", f"{human_bytes(s['sample_bytes'])} ({pct(s['sample_bytes'], s['bytes_in'])} of corpus)"],
        ["cropped documents", s["cropped_docs"]],
        ["sample mix: Chinese chars / ASCII letters",
         f"{pct(s['han_chars'], mix)} / {pct(s['ascii_letters'], mix)}"],
        ["sample docs: Chinese / English", f"{s['zh_docs']:,} / {s['en_docs']:,}"],
        ["vocabulary (largest id)", f"{verification['vocab_size']:,} ({verification['max_id']:,})"],
        ["round trip", f"lossless on {verification['round_trip_texts']} texts"],
        ["literal <|endoftext|> in text", "ordinary tokens (checked)"],
    ]
    for lang, c in comp.items():
        if c["docs"]:
            rows.append([f"held-out {lang}: chars/token, bytes/token",
                         f"{c['chars_per_token']:.2f}, {c['bytes_per_token']:.2f} ({c['docs']} docs)"])
        else:
            rows.append([f"held-out {lang}", "no documents"])
    return rows


def write_outputs(staging: Path, tok, heldout: pa.Table, vocab_size: int) -> None:
    """Everything passed: write the tokenizer and the held-out text into the staging
    folder. The sample files are not part of the output: the commit drops them with the
    rest of the tasks' work (a run killed before it resumes with them still there)."""
    tok.save(str(staging / "tokenizer.json"))
    write_json(staging / "tokenizer_config.json", tokenizer_checks.tokenizer_config(vocab_size))
    report = staging / "report"
    report.mkdir(exist_ok=True)
    pq.write_table(heldout, staging / HELDOUT, compression="zstd")

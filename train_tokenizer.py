"""Step 4 (tutorial section 4): train a byte-level BPE tokenizer on a sample of the corpus.

    python train_tokenizer.py                         # data/dedup/ -> data/tokenizer/
    python train_tokenizer.py --vocab-size 8000       # the bundled sample (make demo)
    python train_tokenizer.py --engine reference      # corpus_iter and BpeTrainer, as 4.7

4.7's tokenizer: BPE on UTF-8 bytes (ByteLevel pre-tokenizer and decoder, all 256 bytes
in the initial alphabet, 4.4), --vocab-size 32000 ids so every id fits in uint16 (4.6),
and 4.8's special tokens at ids 0-10 (<|endoftext|>, <|im_start|>, <|im_end|>,
<|reserved_0|> ... <|reserved_7|>).

Step 2, the sample: --sample-ratio (0.05) of the corpus's text, at least --min-bytes and
at most --max-bytes (2 GB), each document drawn by a seeded hash of its id, so the sample
keeps the corpus's language mix (printed); --heldout-bytes (5 MB) are held out first, to
measure compression (4.5). Steps 3-4, training: BpeTrainer's algorithm, compiled (the
fast engine), or BpeTrainer itself (--engine reference): the same tokenizer.json, byte
for byte. The trainer's memory is estimated before it starts, and a sample that would not
fit stops the stage with the --max-bytes that would. Step 5, the checks: the vocabulary's
size and largest id, a lossless round trip on English, Chinese, emoji and real
documents, the special tokens' ids, and a literal "<|endoftext|>" in text never encoded
as the special token; any miss stops the stage before anything is saved.

Output: tokenizer.json, tokenizer_config.json (for transformers), report/heldout.parquet
(for compare_tokenizers.py) and the manifest, byte-identical for any --workers; a rerun
that would write the same trains nothing (--force trains anyway). More:
docs/stages/tokenizer.md.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import os
import time

from algorithms import tokenizer_checks, tokenizer_sample
from algorithms.tokenizer_file import SPECIAL_TOKENS
from pipeline import layout
from pipeline.errors import StageError, run_stage
from pipeline.progress import peak_rss_mb, task_progress
from pipeline.sample_files import (UnitSample, iter_sample, read_heldout, read_words,
                                   sample_paths, shard_text_bytes)
from pipeline.stage import Output, Run, Stage
from pipeline.tables import parse_size, size_arg
from pipeline.task_results import save_task_result
from pipeline.tokenizer_report import PAIR_COUNT_LIMIT, check_memory, sample_counts, stage_output
from pipeline.units import read_unit


# --------------------------------------------------------------------------------------
# 4.7 step 2: the sample, drawn by one task per unit of the input.
# --------------------------------------------------------------------------------------

def sample_unit(rank: int, world_size: int, units: list[dict], staging: str,
                heldout_share: float, train_share: float, seed: int,
                max_doc_chars: int, count_words: bool = False,
                train_rows: int | None = None) -> None:
    """Task `rank`: the held-out and training rows of unit `rank`, each document drawn by
    its seeded id hash (algorithms/tokenizer_sample.py: choose_rows), written into the
    staging folder with their language mix (pipeline/sample_files.py: UnitSample).
    count_words: also count the training rows' words, the compiled trainer's input.
    train_rows: write only the first train_rows training rows (all are counted): the
    compiled trainer reads the words, and the checks only the first texts (None: every
    row, for BpeTrainer)."""
    cuts = tokenizer_sample.share_cuts(heldout_share, train_share)
    sample = UnitSample(staging, rank, cuts, seed, max_doc_chars, count_words, train_rows)
    prog = task_progress()
    for batch in read_unit(units[rank], columns=["id", "text"]):
        prog.add(batch.num_rows, sample.add(batch))
    save_task_result(staging, "sample", rank, sample.close())


# --------------------------------------------------------------------------------------
# The stage: 4.7 step 2 (the sample, one task per unit: algorithms/tokenizer_sample.py),
# steps 3-4 (train), step 5 (check), 4.5 (compression).
# --------------------------------------------------------------------------------------

def run(run: Run) -> Output:
    args, tasks = run.args, len(run.units)
    total = sum(shard_text_bytes(run.input, run.shards))
    if total == 0:
        raise StageError(f"{run.input}: the shards hold no text")
    heldout_target, sample_target = tokenizer_sample.plan_sample(        # 4.7 step 2
        total, args.sample_ratio, args.min_bytes, args.max_bytes, args.heldout_bytes)
    run.parallel("sample", sample_unit, units=run.unit_dicts(), staging=str(run.staging),
                 heldout_share=heldout_target / total, train_share=sample_target / total,
                 seed=args.seed, max_doc_chars=args.max_doc_chars,
                 count_words=args.engine == "fast",
                 # BpeTrainer reads the sample's texts; the compiled trainer its words,
                 # and the checks (4.7 step 5) only the first texts
                 train_rows=None if args.engine == "reference" or args.compare_hf
                 else tokenizer_checks.REAL_DOCS_CHECKED)
    s = sample_counts(run, run.results("sample"), total, sample_target)
    need = check_memory(s, args)

    from algorithms import bpe_trainer   # numba and tokenizers: only when training

    with run.phase("train"):                                   # 4.7 steps 3 and 4
        t = time.time()
        if args.engine == "fast":   # the words, counted by the sample's tasks
            tok = bpe_trainer.train_words(read_words(run.staging, tasks),
                                          args.vocab_size, args.min_frequency, SPECIAL_TOKENS)
        else:   # 4.7 as written: BpeTrainer, fed the sample by corpus_iter
            tok = bpe_trainer.train_hf(tokenizer_sample.corpus_iter(sample_paths(run.staging,
                                                                                 tasks)),
                                       args.vocab_size, args.min_frequency, SPECIAL_TOKENS,
                                       args.workers)
        s.update(train_seconds=time.time() - t, peak_mb=peak_rss_mb())   # training's peak
    heldout = read_heldout(run.staging, tasks)
    with run.phase("verify"):                                  # 4.7 step 5
        real = heldout.column("text").to_pylist()[:tokenizer_checks.REAL_DOCS_CHECKED // 2]
        for batch in iter_sample(run.staging, tasks):   # across units
            real += batch[:tokenizer_checks.REAL_DOCS_CHECKED - len(real)]
            if len(real) >= tokenizer_checks.REAL_DOCS_CHECKED:
                break
        verification = tokenizer_checks.verify(tok, args.vocab_size, s["sample_bytes"], real,
                                                args.min_frequency)
    with run.phase("compression"):                             # 4.5
        comp = bpe_trainer.measure_compression_fast(tok, heldout)
    hf_diff = compare_with_bpetrainer(run, tok, tasks) if args.compare_hf else None
    return stage_output(run, tok, heldout, s, need, verification, comp, hf_diff)


def compare_with_bpetrainer(run: Run, tok, tasks: int) -> int:
    """--compare-hf: train BpeTrainer itself on the same sample and count the tokens of
    one vocabulary that are not in the other (0 when the files are the same)."""
    from algorithms import bpe_trainer

    with run.phase("train_hf"):
        other = bpe_trainer.train_hf(iter_sample(run.staging, tasks), run.args.vocab_size,
                                     run.args.min_frequency, SPECIAL_TOKENS, run.args.workers)
    return bpe_trainer.vocab_difference(tok, other)


# --------------------------------------------------------------------------------------

def flags(p, argv) -> None:
    p.add_argument("--vocab-size", type=int, default=32000,
                   help="ids in the vocabulary, special tokens included (default 32000)")
    p.add_argument("--min-frequency", type=int, default=2,
                   help="a pair must occur this often to be merged (default 2)")
    p.add_argument("--sample-ratio", type=float, default=0.05,
                   help="share of the corpus's text bytes to train on (default 0.05, as in 4.7)")
    p.add_argument("--min-bytes", type=size_arg, default=None,
                   help="train on at least this many bytes, or the whole corpus (default 1 GB, "
                        "or --max-bytes when that is smaller)")
    p.add_argument("--max-bytes", type=size_arg, default=2_000_000_000,
                   help=f"train on about this many bytes, within a few percent (default 2 GB; at "
                        f"most {PAIR_COUNT_LIMIT:,})")
    p.add_argument("--max-doc-chars", type=int, default=100_000,
                   help="crop longer documents to this many characters (default 100000)")
    p.add_argument("--heldout-bytes", type=size_arg, default=5_000_000,
                   help="text held out of training to measure compression (default 5 MB, "
                        f"at most {tokenizer_sample.HELDOUT_MAX_SHARE * 100:.0f}%% of the corpus)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    p.add_argument("--memory-budget", default="auto",
                   help="stop before training when the trainer is expected to need more "
                        "memory than this, e.g. 16GB (default auto: the memory available "
                        "now). Never changes the output")
    p.add_argument("--compare-hf", action="store_true",
                   help="also train BpeTrainer on the same sample and record how many tokens "
                        "of the two vocabularies differ (costs BpeTrainer's time)")


def check(args) -> None:
    """Refuse flags that cannot give a usable tokenizer, before any work."""
    least = 256 + len(SPECIAL_TOKENS) + 1   # the bytes, the special tokens, one merge
    if not least <= args.vocab_size <= tokenizer_checks.ID_LIMIT:   # ids 0 .. vocab - 1
        raise StageError(f"--vocab-size {args.vocab_size}: must be between {least} (the 256 "
                         f"bytes, {len(SPECIAL_TOKENS)} special tokens and one merge) and "
                         f"{tokenizer_checks.ID_LIMIT}, so every id fits in uint16 (4.6)")
    if not 0 < args.sample_ratio <= 1:
        raise StageError(f"--sample-ratio {args.sample_ratio}: must be in (0, 1]")
    if args.max_bytes > PAIR_COUNT_LIMIT:
        raise StageError(f"--max-bytes {args.max_bytes:,}: above {PAIR_COUNT_LIMIT:,} a pair "
                         "count can overflow BpeTrainer's 32-bit counters (tokenizers issue 2058)")
    if args.min_bytes is None:   # the default floor, never above a --max-bytes given
        args.min_bytes = min(1_000_000_000, args.max_bytes)
    if args.min_bytes < 0 or args.max_bytes <= 0 or args.min_bytes > args.max_bytes:
        raise StageError(f"--min-bytes {args.min_bytes:,} / --max-bytes {args.max_bytes:,}: "
                         "need 0 <= --min-bytes <= --max-bytes and --max-bytes > 0")
    if args.max_doc_chars <= 0:
        raise StageError(f"--max-doc-chars {args.max_doc_chars}: must be positive")
    for flag, v in (("--heldout-bytes", args.heldout_bytes),
                    ("--min-frequency", args.min_frequency)):
        if v < 0:
            raise StageError(f"{flag} {v}: must not be negative")
    if args.min_frequency >= 2 ** 63:   # the trainers' 64-bit counts (no sample gets near)
        raise StageError(f"--min-frequency {args.min_frequency}: must be at most 2**63-1")
    if not 0 <= args.seed < 2 ** 64:
        raise StageError(f"--seed {args.seed}: must be between 0 and 2**64-1")
    if args.memory_budget != "auto":
        parse_size(args.memory_budget, "--memory-budget")
    # tokenizers trains on a rayon thread pool sized by RAYON_NUM_THREADS, read when the
    # pool first starts: set before any tokenizers call. The result does not depend on it.
    os.environ["RAYON_NUM_THREADS"] = str(args.workers)


# What this code writes for a given input and flags: raised whenever that changes (the
# sample, the held-out draw, the files), so a tokenizer made by older code is not kept as
# current. 2: the language counts and held-out text of the code since the held-out
# documents were cropped like the sample's (a tokenizer of the older code kept its older
# report/heldout.parquet, which a fresh run no longer writes).
OUTPUT_VERSION = 2


def config(run: Run) -> dict:
    """The output depends only on the input, this config and the library: when the
    tokenizer in place was trained from them, a rerun keeps it (training is the slowest
    step of a rerun of the whole pipeline)."""
    from importlib.metadata import version

    a = run.args
    return {"output_version": OUTPUT_VERSION,
            "vocab_size": a.vocab_size, "min_frequency": a.min_frequency,
            "sample_ratio": a.sample_ratio, "min_bytes": a.min_bytes,
            "max_bytes": a.max_bytes, "max_doc_chars": a.max_doc_chars,
            "heldout_bytes": a.heldout_bytes, "seed": a.seed,
            "special_tokens": SPECIAL_TOKENS, "tokenizers": version("tokenizers"),
            # --compare-hf adds BpeTrainer's difference to the output (and needs the
            # sample's texts): a run with it is not the run without it
            **({"compare_hf": True} if a.compare_hf else {})}


def space(run: Run) -> int:
    """The sample and the held-out text, as zstd parquet (about half their text)."""
    a = run.args
    return int(0.5 * min(run.total_bytes, max(a.max_bytes, a.min_bytes) + a.heldout_bytes))


STAGE = Stage("train_tokenizer", __doc__, run, flags=flags, check=check, config=config,
              space=space, reads=layout.DEDUP, reuse_current=True, compiled=True, engines=True,
              current_note=lambda run: f"its report: {run.output}/report/train_tokenizer_stats.md")


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)

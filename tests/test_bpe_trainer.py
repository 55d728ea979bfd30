"""algorithms/bpe_trainer.py: the compiled trainer gives BpeTrainer's tokenizer.json byte
for byte, for any number of threads, min_frequency included; rustbpe's (bench/rustbpe_eval.py:
evaluated, not the default) gives the tutorial's artefact, as good as BpeTrainer's; the words
are HF's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from algorithms import bpe_trainer, tokenizer_checks, tokenizer_sample
from algorithms import bpe_trainer as bt
from conftest import ROOT, SAMPLE
import rustbpe_eval as rb   # bench/: rustbpe, evaluated
from algorithms.packing_fast import BpeEncoder, codepoint_classes
from algorithms.tokenizer_file import GPT2_PATTERN, SPECIAL_TOKENS, byte_decoder, ordinary_tokenizer

VOCAB = 4000
# text where letters and numbers of a newer Unicode than HF's regex engine knows sit
# beside ASCII letters and punctuation: HF cuts pieces around them
NEW_UNICODE = ["x\u0558!! ", "ab\u0558y ", "\U000323b0\U000323b1。", "9\U00011de0 ", "q\ua7ce, "]


def sample_split() -> tuple[list[str], pa.Table]:
    """The bundled sample: training texts, and every 10th document held out (text, lang)."""
    texts = [t for t in pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist() if t]
    held = texts[::10]
    train = [t for i, t in enumerate(texts) if i % 10] + ["".join(NEW_UNICODE)] * 400
    langs = tokenizer_sample.doc_languages(*tokenizer_sample.script_counts(pa.array(held, pa.string())))
    return train, pa.table({"text": held, "lang": list(langs)})


def batches(texts: list[str], size: int = 500) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


@pytest.fixture(scope="module")
def trained():
    """The sample's training part at VOCAB ids: (compiled, BpeTrainer, rustbpe, texts,
    held-out table)."""
    train, held = sample_split()
    fast = bt.train_fast(batches(train), VOCAB, 2, SPECIAL_TOKENS, threads=2)
    hf = bt.train_hf(batches(train), VOCAB, 2, SPECIAL_TOKENS, threads=2)
    rust = rb.train_rustbpe(batches(train), VOCAB, 2, SPECIAL_TOKENS, threads=2)
    return fast, hf, rust, train, held


def test_compiled_trainer_gives_bpetrainers_tokenizer_byte_for_byte(trained, tmp_path):
    fast, hf = trained[0], trained[1]
    assert fast.to_str() == hf.to_str()
    a, b = tmp_path / "fast.json", tmp_path / "hf.json"
    fast.save(str(a))
    hf.save(str(b))
    assert a.read_bytes() == b.read_bytes()
    assert bt.vocab_difference(fast, hf) == 0 and fast.get_vocab_size() == VOCAB


def test_compiled_trainer_stops_where_bpetrainer_stops_on_min_frequency():
    """300 documents cannot fill 30000 ids with pairs seen twice: both trainers stop at
    the same short vocabulary (the stage's check then refuses it)."""
    train = sample_split()[0][:300]
    fast = bt.train_fast(batches(train, 100), 30000, 2, SPECIAL_TOKENS, threads=2)
    assert fast.to_str() == bt.train_hf(batches(train, 100), 30000, 2, SPECIAL_TOKENS).to_str()
    assert 2000 < fast.get_vocab_size() < 30000
    with pytest.raises(ValueError, match="too small"):
        tokenizer_checks.check_vocab(fast, 30000, 1)
    # every merge kept was seen at least twice (the counts replayed on the text); without
    # min_frequency the same merges come first, and the next one was seen once
    kept = byte_id_merges(fast)
    assert len(kept) == fast.get_vocab_size() - len(SPECIAL_TOKENS) - 256
    assert rb.merge_counts([train], kept).min() >= 2
    every = byte_id_merges(bt.train_fast(batches(train, 100), 30000, 0, SPECIAL_TOKENS))
    assert np.array_equal(every[:len(kept)], kept)
    assert rb.merge_counts([train], every)[len(kept)] < 2


def byte_id_merges(tok) -> np.ndarray:
    """A byte-level tokenizer's merges with ids as merge_counts takes them: bytes by value,
    merge k as 256 + k."""
    ids = dict(byte_decoder())
    out = []
    for k, (x, y) in enumerate(json.loads(tok.to_str())["model"]["merges"]):
        out.append((ids[x], ids[y]))
        ids[x + y] = 256 + k
    return np.array(out, np.int64).reshape(-1, 2)


# ---- the artefact ------------------------------------------------------------------------

def test_rustbpe_tokenizer_is_laid_out_as_bpetrainers(trained, tmp_path):
    fast, hf = trained[2], trained[1]
    a, b = json.loads(fast.to_str()), json.loads(hf.to_str())
    # everything but the learnt vocabulary and merges: added tokens (the specials at
    # 0..10, special), pre-tokenizer, decoder, model options
    assert {k: v for k, v in a.items() if k != "model"} == {k: v for k, v in b.items() if k != "model"}
    assert a["pre_tokenizer"]["type"] == "ByteLevel" and not a["pre_tokenizer"]["add_prefix_space"]
    assert a["decoder"]["type"] == "ByteLevel"
    strip = ("vocab", "merges")
    assert {k: v for k, v in a["model"].items() if k not in strip} == \
           {k: v for k, v in b["model"].items() if k not in strip}
    va, vb = a["model"]["vocab"], b["model"]["vocab"]
    assert len(va) == VOCAB == fast.get_vocab_size()
    n = len(SPECIAL_TOKENS)
    # specials, then the 256 bytes in BpeTrainer's order, then one token per merge
    assert [t for t, i in sorted(va.items(), key=lambda x: x[1])][:n + 256] == \
           [t for t, i in sorted(vb.items(), key=lambda x: x[1])][:n + 256]
    assert sorted(va.values()) == list(range(VOCAB))
    merges = a["model"]["merges"]
    assert len(merges) == VOCAB - n - 256
    assert [va[x + y] for x, y in merges] == list(range(n + 256, VOCAB))
    # it loads from the file, in tokenizers and in transformers, and passes the stage's checks
    path = tmp_path / "tokenizer.json"
    fast.save(str(path))
    from tokenizers import Tokenizer
    assert Tokenizer.from_file(str(path)).to_str() == fast.to_str()
    transformers = pytest.importorskip("transformers")
    t = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    text = "Hello , world .  机器学习 😀\n\n  x"
    assert t.decode(t(text)["input_ids"]) == text and len(t) == VOCAB
    checks = tokenizer_checks.verify(fast, VOCAB, 1, trained[4].column("text").to_pylist()[:50])
    assert checks["vocab_size"] == VOCAB and checks["special_ids"][SPECIAL_TOKENS[-1]] == n - 1


@pytest.mark.parametrize("which", [0, 2])
def test_compiled_encoder_gives_hf_ids_on_the_trained_tokenizers(trained, which):
    tok, held = trained[which], trained[4]
    enc, plain = BpeEncoder.from_tokenizer(tok), ordinary_tokenizer(tok)
    texts = held.column("text").to_pylist() + NEW_UNICODE + ["".join(NEW_UNICODE)] + [
        "emoji 😀 测试 👩‍👩‍👧 🇨🇳", "a" * 200, "  \t\n\n x  y\u3000z\xa0", "don't we'll I'M"]
    bad = [t for t in texts if enc.ids(t).tolist() != plain.encode(t, add_special_tokens=False).ids]
    assert not bad, bad[:2]


def test_train_hf_is_the_tutorials_code(trained):
    """train_hf gives byte for byte what section 4.7's steps 3 and 4 give, written out here
    as the tutorial has them (with this suite's special tokens and --min-frequency)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    train = trained[3][:200]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, min_frequency=2,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(batches(train), trainer=trainer)
    assert bt.train_hf(batches(train), 800, 2, SPECIAL_TOKENS).to_str() == tokenizer.to_str()


# ---- quality ---------------------------------------------------------------------------

def test_rustbpe_compresses_as_bpetrainer_on_held_out_english_and_chinese(trained):
    fast, hf, held = trained[2], trained[1], trained[4]
    a, b = tokenizer_checks.measure_compression(fast, held), tokenizer_checks.measure_compression(hf, held)
    for lang in ("en", "zh"):
        assert a[lang]["docs"] > 20
        assert a[lang]["bytes_per_token"] == pytest.approx(b[lang]["bytes_per_token"], rel=0.005), lang
    # the vocabularies differ only where ties between equally frequent pairs were broken
    # the other way
    d = bt.vocab_difference(fast, hf)
    assert d == bt.vocab_difference(hf, fast)
    assert 0 < d < 0.02 * VOCAB
    assert bt.vocab_difference(fast, fast) == 0


def test_compression_with_the_compiled_encoder_gives_the_same_numbers(trained):
    fast, held = trained[2], trained[4]
    assert bt.measure_compression_fast(fast, held) == tokenizer_checks.measure_compression(fast, held)


# ---- the split ---------------------------------------------------------------------------

def test_words_are_hf_bytelevels_pieces():
    """The words both trainers count are HF ByteLevel's pieces on tricky strings: the
    compiled trainer's (count_words) exactly, with their counts; rustbpe's, trained to the
    end, make each word one token, so its encoding shows its cuts."""
    import rustbpe
    from tokenizers import pre_tokenizers

    parts = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", " ", "  ", "\n", "\t",
             "\r\n", "\u3000", "\xa0", "\u2028", "\x1c", "a", "Zz", "中文", "的", "1", "٣",
             "½", "!", "?!", "。", "🙂", "👍🏽", "\u200d", "e\u0301", "\x00", "ǅ", "ß"] + NEW_UNICODE
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(parts, size=rng.integers(1, 30))) for _ in range(2000)]
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
    dec = byte_decoder()
    want: dict[bytes, int] = {}
    for t in texts:
        for p, _ in pre.pre_tokenize_str(t):
            w = bytes(dec[c] for c in p)
            want[w] = want.get(w, 0) + 1
    buf, lengths, counts = bt.count_words(batches(texts, 7), threads=2)
    ends = np.cumsum(lengths)
    got = {bytes(buf[e - n:e]): int(c) for e, n, c in zip(ends, lengths, counts)}
    assert got == want and len(got) == len(lengths)
    r = rustbpe.Tokenizer()
    r.train_from_iterator(texts, vocab_size=1_000_000, pattern=GPT2_PATTERN)
    vocab = [bytes(b) for b, _ in sorted(r.get_mergeable_ranks(), key=lambda x: x[1])]
    for t in texts:
        assert [vocab[i] for i in r.encode(t)] == \
               [bytes(dec[c] for c in p) for p, _ in pre.pre_tokenize_str(t)], repr(t)


def test_words_counted_from_arrow_buffers_and_united_equal_count_words():
    """The sample tasks' path (words_of on a batch's Arrow buffers, batches united by
    WordUnion) counts the same words as count_words on the same texts, and the memory
    estimate's hash sample of them (sampled_words) equals the one drawn from the texts
    (sampled_pieces)."""
    from algorithms.packing_fast import sampled_pieces, sampled_words
    from algorithms.arrays import text_buffers

    train, _ = sample_split()

    def as_dict(words):
        buf, lengths, counts = words
        ends = np.cumsum(lengths)
        return {bytes(buf[e - n:e]): int(c) for e, n, c in zip(ends, lengths, counts)}

    union, parts = bt.WordUnion(), []
    for b in batches(train, 300):
        # a sliced column: its offsets do not start at 0
        col = pa.array([""] + b, pa.string()).slice(1)
        parts.append(bt.words_of(*text_buffers(col)))
        union.add(parts[-1])
    got = union.result()
    want = bt.count_words(batches(train), threads=2)
    assert as_dict(got) == as_dict(want) and len(got[1]) == len(want[1])
    # the stage's driver unites its tasks' words in one pass: the same words and counts
    assert len(parts) > 2
    flat = bt.unite_words(parts)
    assert as_dict(flat) == as_dict(want) and len(flat[1]) == len(want[1])
    assert [len(a) for a in bt.unite_words([])] == [0, 0, 0]
    buf, offsets = text_buffers(pa.array(train, pa.string()))
    for bits in (0, 3, 6):
        h1, n1 = sampled_pieces(buf, offsets, bits)
        h2, n2 = sampled_words(got[0], got[1], bits)
        assert h1.tolist() == h2.tolist() and n1.tolist() == n2.tolist() and len(h1) > 0


def test_letters_numbers_spaces_of_every_code_point_as_hf():
    """rustbpe's regex engine, HF's and the compiled scanner's class table agree on every
    code point (the scanner's table once had 17,480 letters and numbers HF does not know)."""
    import rustbpe
    from tokenizers import Regex, pre_tokenizers

    points = np.r_[0:0xD800, 0xE000:0x110000].astype("<u4")
    text = points.tobytes().decode("utf-32-le")
    classes = codepoint_classes()[points]
    for value, pattern in ((1, r"\p{L}"), (2, r"\p{N}"), (3, r"\s")):
        rest = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
        other = np.frombuffer("".join(p for p, _ in rest).encode("utf-32-le"), "<u4")
        hf = np.setdiff1d(points, other)
        r = rustbpe.Tokenizer()
        r.train_from_iterator([""], vocab_size=256, pattern=pattern)   # no merges: the matches
        rust = np.frombuffer(r.decode(r.encode(text)).encode("utf-32-le"), "<u4")
        assert np.array_equal(hf, np.sort(rust)), pattern
        assert np.array_equal(hf, points[classes == value]), pattern


# ---- determinism ---------------------------------------------------------------------------

TRAIN_IN_CHILD = """
import sys
sys.path.insert(0, {root!r})
from algorithms import bpe_trainer as bt
bt.WORD_CHUNK = 1 << 16   # many chunks, counted on the threads in any order
import pyarrow.parquet as pq
texts = [t for t in pq.read_table({sample!r}, columns=["text"]).column("text").to_pylist() if t][:1000]
tok = getattr(bt, {fn!r})((texts[i:i + 300] for i in range(0, len(texts), 300)), 2000, 2,
                          threads={threads})
sys.stdout.write(tok.to_str())
"""


def test_same_bytes_for_1_2_and_4_threads():
    fn = "train_fast"
    outs = []
    for threads in (1, 2, 4):
        code = TRAIN_IN_CHILD.format(root=str(ROOT), sample=str(SAMPLE), fn=fn, threads=threads)
        cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
        assert cp.returncode == 0, cp.stderr[-2000:]
        outs.append(cp.stdout)
    assert outs[0] == outs[1] == outs[2] and json.loads(outs[0])["model"]["merges"]


# ---- merges, counts, min_frequency ---------------------------------------------------------

def test_replayed_counts_are_rustbpes(trained):
    """merge_counts gives the count rustbpe logged for each merge it reported (one per
    1% of the merges), and the counts never grow."""
    import rustbpe

    train = trained[3][::2]
    log = rb._rustbpe_logger()
    seen = rb._MergeLog()
    log.addHandler(seen)
    try:
        r = rustbpe.Tokenizer()
        r.train_from_iterator(train, vocab_size=2000, pattern=GPT2_PATTERN)
    finally:
        log.removeHandler(seen)
    tokens = [bytes(b) for b, _ in sorted(r.get_mergeable_ranks(), key=lambda x: x[1])]
    merges = rb.recover_merges(tokens)
    counts = rb.merge_counts(batches(train), merges)
    assert len(seen.merges) == 100
    for done, pair, new, count in seen.merges:
        assert tuple(merges[new - 256]) == pair and counts[new - 256] == count
    assert np.all(np.diff(counts) <= 0) and counts[-1] > 1


def test_rustbpe_min_frequency_stops_where_pairs_get_rare():
    """300 documents cannot fill 30000 ids with pairs seen twice: rustbpe's vocabulary is
    cut short (every merge seen at least twice, the next one rustbpe made once), about
    where BpeTrainer's stops, and the stage's check refuses it."""
    import rustbpe

    train = sample_split()[0][:300]
    fast = rb.train_rustbpe(batches(train, 100), 30000, 2, SPECIAL_TOKENS)
    n = fast.get_vocab_size()
    assert 2000 < n < 30000
    # about where BpeTrainer stops (the compiled trainer stops exactly there, tested above)
    assert n == pytest.approx(bt.train_fast(batches(train, 100), 30000, 2).get_vocab_size(),
                              rel=0.02)
    r = rustbpe.Tokenizer()
    r.train_from_iterator(train, vocab_size=30000, pattern=GPT2_PATTERN)
    tokens = [bytes(b) for b, _ in sorted(r.get_mergeable_ranks(), key=lambda x: x[1])]
    merges = rb.recover_merges(tokens)
    counts = rb.merge_counts([train], merges)
    kept = n - len(SPECIAL_TOKENS) - 256
    assert counts[:kept].min() >= 2 and counts[kept] < 2
    assert json.loads(fast.to_str())["model"]["merges"] == \
        json.loads(bt.to_hf(tokens[:256 + kept], merges[:kept]).to_str())["model"]["merges"]
    # a one-shot stream is kept for the second pass when it is small
    assert rb.train_rustbpe(iter(batches(train, 100)), 30000, 2).to_str() == fast.to_str()


def test_one_shot_stream_too_long_to_keep_is_refused(monkeypatch):
    train = sample_split()[0][:300]
    monkeypatch.setattr(rb, "ONE_SHOT_KEEP", 1000)
    with pytest.raises(RuntimeError, match="re-iterable"):
        rb.train_rustbpe(iter(batches(train, 100)), 30000, 2)


def test_a_token_that_is_not_a_merge_is_refused():
    tokens = [bytes([i]) for i in range(256)] + [b"ab", b"abc", b"xyz"]
    assert rb.recover_merges(tokens[:258]).tolist() == [[97, 98], [256, 99]]
    with pytest.raises(RuntimeError, match="not one merge"):
        rb.recover_merges(tokens)


STOPPABLE_CHILD = """
import sys, time
import numpy as np
from algorithms import bpe_trainer as bt
from pipeline.errors import run_stage

def main(argv=None):
    rng = np.random.default_rng(0)
    n, size = 600_000, 12   # distinct words: a merge loop of about 2 s
    words = (rng.integers(97, 117, n * size, dtype=np.uint8), np.full(n, size, np.int64),
             rng.integers(1, 50, n).astype(np.int64))
    print("training", flush=True)
    t = time.time()
    bt.train_words(words, 60_000, 0)
    print(f"trained {time.time() - t:.3f}", flush=True)

run_stage(main)
"""


def test_a_signal_stops_the_compiled_merge_loop_at_once():
    """Ctrl-C, SIGTERM and SIGHUP during train_tokenizer's merge loop (one compiled call,
    minutes on a large sample) stop it at once with the stage's one line and exit code:
    the loop runs on a thread of its own (run_interruptibly). Held until the loop
    returned, Ctrl-C waited for it, and SIGTERM ended the process without a word. The
    signal also comes while numba loads the loop from its cache, which crashed the
    process (SIGSEGV) when a KeyboardInterrupt was raised inside that loading."""
    import signal
    import time

    def start():
        p = subprocess.Popen([sys.executable, "-c", STOPPABLE_CHILD], text=True,
                             cwd=Path(__file__).resolve().parents[1],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout.readline().strip() == "training"
        return p

    p = start()   # the whole loop, uninterrupted (numba's cache warm from here on)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    loop = float(out.split()[-1])
    assert loop > 0.8, f"the loop took {loop:.2f} s: too short to tell at once from after"
    # the signal a quarter of the way into the call (its loop is 4/5 of it); the last one
    # as numba loads the loop
    for sig, code, line, after in [(signal.SIGINT, 130, "interrupted", loop / 4),
                                   (signal.SIGTERM, 143, "stopped by SIGTERM", loop / 4),
                                   (signal.SIGHUP, 129, "stopped by SIGHUP", loop / 4),
                                   (signal.SIGINT, 130, "interrupted", 0.0)]:
        p = start()
        time.sleep(after)
        sent = time.time()
        p.send_signal(sig)
        out, err = p.communicate(timeout=300)
        took = time.time() - sent
        assert p.returncode == code, (sig, p.returncode, err)
        assert "trained" not in out and line in err, (sig, out, err)
        assert took < loop / 4, f"{sig!r}: exit {took:.2f} s after it, the loop takes {loop:.2f}"



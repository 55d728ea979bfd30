"""The MinHash kernel of dedup_minhash.py, bit for bit against a plain numpy reference of
its definition, and the same signatures from code compiled for AVX2 without AVX-512."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

from algorithms import minhash as dm
from algorithms import minhash_fast as fast
from algorithms.exact_dedup import normalise

U64 = np.uint64
FNV_OFFSET, FNV_PRIME = U64(0xCBF29CE484222325), U64(0x100000001B3)


# --------------------------------------------------------------------------------------
# The reference: the definition, written out in numpy uint64 (which wraps mod 2^64).
# --------------------------------------------------------------------------------------

def fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> U64(33))
    h = h * U64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> U64(33))
    h = h * U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> U64(33))


def shingle_hashes(text: str, n: int) -> np.ndarray:
    """32-bit hash of every n-character shingle (the whole text if it is shorter):
    FNV-1a over the code points, xor the length, fmix64, top 32 bits."""
    cp = np.array([ord(c) for c in text], dtype=U64)
    width = min(n, len(cp))
    count = len(cp) - width + 1
    h = np.full(count, FNV_OFFSET, dtype=U64)
    for q in range(width):
        h = (h ^ cp[q:q + count]) * FNV_PRIME
    return fmix64(h ^ U64(width)) >> U64(32)


def min_hash(x: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """min over x of h_i(x) = ((a_i * x + b_i) & (2^64 - 1)) >> 32, for every i."""
    out = np.full(len(a), 0xFFFFFFFF, dtype=U64)
    for s in range(0, len(x), chunk):
        xs = x[s:s + chunk, None].astype(U64)
        h = ((a[None, :] * xs + b[None, :]) & U64(2**64 - 1)) >> U64(32)
        out = np.minimum(out, h.min(axis=0))
    return out.astype(np.uint32)


def reference(mh: dm.MinHasher, text: str | None, normalised: bool = False) -> np.ndarray:
    t = (text or "") if normalised else normalise(text)
    return min_hash(shingle_hashes(t, mh.n), mh.a, mh.b)


def assert_matches_reference(mh: dm.MinHasher, texts: list, normalised: bool = False):
    sig, lens = mh.signatures_and_lengths(texts, normalised)
    for i, t in enumerate(texts):
        assert (sig[i] == reference(mh, t, normalised)).all(), (mh.k, mh.n, repr(t)[:80])
        want = len(t or "") if normalised else len(normalise(t))
        assert lens[i] == want, repr(t)[:80]


# --------------------------------------------------------------------------------------
# Texts.
# --------------------------------------------------------------------------------------

VARIED = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox, again!",
    "  Leading and   trailing\twhitespace,\n\nnew lines\r\n and\u00a0no-break\u3000spaces  ",
    "数据工程是大语言模型预训练的基础，去重可以减少重复内容。数据工程",
    "emoji 😀😀😀 and flags 🇩🇪🇫🇷 and 👩‍👩‍👧 families",
    "ΟΔΟΣ ΣΟΦΟΣ ΚΟΣΜΟΣ Σ",           # capital sigma: normalise() lowers it by context
    "İstanbul DİYARBAKIR",           # U+0130 lowers to two characters
    "Ǆemal ǅ ǆ ﬁ ß ẞ Ω K Å",          # title case, ligature, compatibility letters
    "ab", "AB  ", "abcd", "abcde", " a ", "x", "", None, "     ", "\x1c\x1d\x1e\x1f",
    "a" * 3000,                      # one shingle, many times
    "abcdefghij" * 500,              # ten distinct shingles
]


def random_texts(seed: int, count: int) -> list[str]:
    """Short random strings: whitespace, case pairs, sigma, CJK, emoji, combining marks,
    and random code points from all planes (no surrogates)."""
    rng = random.Random(seed)
    alphabet = ["a", "B", "z", "Σ", "σ", "ς", "İ", "i", "中", "文", "😀", "\U00010400",
                " ", "  ", "\n", "\t", "\u2028", "\u3000", "\x85", "\u0301", "'", "."]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.2:
                c = rng.randrange(0x110000 - 0x800)
                parts.append(chr(c + 0x800 if c >= 0xD800 else c))
            else:
                parts.append(rng.choice(alphabet))
        out.append("".join(parts))
    return out


# --------------------------------------------------------------------------------------
# Tests.
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,n", [(128, 5), (7, 1), (16, 3), (33, 9)])
def test_signatures_equal_the_reference(k, n):
    mh = dm.MinHasher(num_perm=k, ngram=n, seed=k + n)
    texts = VARIED + random_texts(k * n, 150)
    assert_matches_reference(mh, texts)
    assert_matches_reference(mh, [normalise(t) for t in texts], normalised=True)
    assert_matches_reference(mh, texts[:40], normalised=True)     # raw text taken as it is


def test_long_text_equals_the_reference():
    rng = random.Random(5)
    words = ["Data", "engineering", "中文", "ΣΟΦΟΣ", "MinHash", "😀", "shingle", "x"]
    text = " \n".join(rng.choice(words) + str(rng.randrange(10**4)) for _ in range(30_000))
    assert len(text) > fast.LONG_TEXT
    mh = dm.MinHasher()
    assert_matches_reference(mh, [text, "short", text.upper()])


def test_many_distinct_shingles_and_the_seen_table_limit():
    """More distinct shingles than the seen-table holds, and a text that repeats them."""
    rng = random.Random(9)
    text = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(3 * fast.SEEN_SLOTS))
    assert_matches_reference(dm.MinHasher(), [text, text + text[::-1] + text])


def test_keep_unseen_drops_repeats_only():
    hs = np.array([5, 9, 5, 0, 0, 7, 9, 5, 2**32 - 1, 2**32 - 1], dtype=np.uint64)
    seen = np.full(64, 123, np.uint32)
    mask = fast._clear_seen(seen, len(hs))
    xs = np.zeros(len(hs), np.uint32)
    kept = fast._keep_unseen(hs, len(hs), seen, mask, xs, 0)
    assert set(xs[:kept].tolist()) == set(hs.tolist())
    assert sorted(xs[:kept].tolist()) == [0, 0, 5, 7, 9, 2**32 - 1]   # 0 marks an empty slot


def test_hashed_sets_equal_the_reference():
    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 2**32, size=m, dtype=np.uint64).astype(np.uint32)
            for m in (0, 1, 2, 7, 8, 9, 100, 2049)]
    mh = dm.MinHasher(num_perm=64)
    sig = mh.signatures_of_hashed_sets(sets)
    for s, row in zip(sets, sig):
        assert (row == min_hash(s, mh.a, mh.b)).all()


@pytest.mark.parametrize("k,n", [(128, 5), (16, 3)])
def test_column_signatures_equal_the_list_ones(k, n):
    """signatures_of_column (the kernel reads the Arrow column's UTF-8 bytes) gives what
    signatures_and_lengths gives for the same texts as Python strings: on the bundled
    sample, on random text over every plane, on the characters left to normalise()
    (capital sigma, U+0130), on nulls, on a text of more bytes than LONG_TEXT but fewer
    characters, on one longer than LONG_TEXT, and on a sliced column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from conftest import SAMPLE

    mh = dm.MinHasher(num_perm=k, ngram=n, seed=3)
    cjk = "".join(chr(0x4E00 + i % 20_000) for i in range(fast.LONG_TEXT // 2))
    assert len(cjk) <= fast.LONG_TEXT < len(cjk.encode())
    long_ascii = "word " * (fast.LONG_TEXT // 4)
    texts = (VARIED + random_texts(k + n, 300) + [None, "", "ab", "ΣΟΦΟΣ ΟΔΟΣ", "İstanbul",
             cjk, long_ascii, "Σ" + cjk, "a\u3000\x85b  \n c\u2028"]
             + pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()[:400])
    col = pa.array(texts, pa.string())
    got_sig, got_len = mh.signatures_of_column(col)
    want_sig, want_len = mh.signatures_and_lengths(texts)
    assert (got_sig == want_sig).all() and (got_len == want_len).all()
    part = col.slice(7, 50)                          # an offset into the buffers
    got_sig, got_len = mh.signatures_of_column(part)
    assert (got_sig == want_sig[7:57]).all() and (got_len == want_len[7:57]).all()
    # what the kernel left to Python: the long texts (-2) and normalise()'s characters
    data, offsets = _buffers(col)
    out, lens = mh.empty(len(texts)), np.zeros(len(texts), np.int64)
    fast._sig_utf8_texts(data, offsets, mh.n, mh.a, mh.b, fast._char_map(), fast.LONG_TEXT,
                         out, lens)
    assert lens[texts.index(cjk)] == -2 and lens[texts.index(long_ascii)] == -2
    assert lens[texts.index("ΣΟΦΟΣ ΟΔΟΣ")] == -1 and lens[texts.index("İstanbul")] == -1
    cmap = fast._char_map()
    for t, m in zip(texts, lens):
        if m != -2:      # -1 exactly for the texts holding a character left to normalise()
            assert (m == -1) == any(cmap[ord(c)] == fast.SPECIAL for c in t or ""), t


def test_column_kernel_refuses_bytes_that_are_not_utf8():
    """Bytes that are not UTF-8 (a truncated character, a stray continuation byte, a lead
    byte beyond U+10FFFF) are left to Python (-1), never read past the text's end."""
    mh = dm.MinHasher(num_perm=8)
    for bad in (b"abc\xe4\xb8", b"\x80abc", b"ab\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80"):
        data = np.frombuffer(bad + b"\xe4\xb8\xad", np.uint8)   # a valid character after
        out, lens = mh.empty(1), np.zeros(1, np.int64)
        fast._sig_utf8_texts(data, np.array([0, len(bad)], np.int64), mh.n, mh.a, mh.b,
                             fast._char_map(), fast.LONG_TEXT, out, lens)
        assert lens[0] == -1, bad


def _buffers(col):
    from algorithms.arrays import text_buffers

    return text_buffers(col)


def test_char_map_is_normalise_one_character_at_a_time():
    cmap = fast._char_map()
    rng = random.Random(1)
    sample = list(range(0x3000)) + rng.sample(range(0x3000, 0x110000), 20_000)
    for c in sample:
        ch = chr(c)
        if 0xD800 <= c < 0xE000:
            continue
        if ch.isspace():
            assert cmap[c] == 32, hex(c)
        elif cmap[c] != fast.SPECIAL:
            assert chr(cmap[c]) == ch.lower() != " ", hex(c)
        else:
            assert c == 0x3A3 or len(ch.lower()) != 1, hex(c)


# --------------------------------------------------------------------------------------
# The same result from code compiled for AVX2 only.
# --------------------------------------------------------------------------------------

AVX2_CHILD = """
import json, sys
import numpy as np
from numba import njit
sys.path.insert(0, {root!r})
from algorithms import minhash as dm
from algorithms import minhash_fast as fast
sys.path.insert(0, {tests!r})
from test_minhash_kernel import VARIED, random_texts
fresh = njit(fast.min_hashes.py_func)       # cached code cannot be inspected
u32 = np.zeros(16, np.uint32)
fresh(u32, 16, u32, u32, np.zeros(16, np.uint64), u32.copy())
sig = dm.MinHasher(num_perm=32).signatures(VARIED + random_texts(7, 60))
print(json.dumps({{"zmm": "zmm" in fresh.inspect_asm(fresh.signatures[0]),
                   "ymm": "ymm" in fresh.inspect_asm(fresh.signatures[0]),
                   "sig": sig.tolist()}}))
"""


def test_avx2_build_gives_the_same_signatures():
    # NUMBA_CPU_NAME alone keeps the host's feature list (AVX-512 included); an empty
    # NUMBA_CPU_FEATURES takes the named CPU's own features: AVX2, no AVX-512
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="")
    code = AVX2_CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"))
    cp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    child = json.loads(cp.stdout.strip().splitlines()[-1])
    assert child["ymm"] and not child["zmm"]
    here = dm.MinHasher(num_perm=32).signatures(VARIED + random_texts(7, 60))
    assert (np.array(child["sig"], dtype=np.uint32) == here).all()

"""algorithms/words(.py, _fast.py): the words datatrove's quality filters count.

- the readable words are spaCy's English tokens (datatrove's word tokenizer), and the
  tables they are cut with are spaCy's own;
- the compiled splitter finds every special case, and its shortcuts cut as the full
  splitter does. (That it gives the readable words on every sample document is checked
  through the signals, in tests/test_quality_signals.py.)
"""

from __future__ import annotations

import json

import numpy as np

from conftest import ROOT
from test_quality_signals import EDGE, sample

from algorithms import words as W
from algorithms import words_fast as WF


def test_special_case_table_finds_every_case():
    """The compiled lookup (open-addressing slots) finds each of spaCy's special cases,
    and nothing for a near miss."""
    F, (SH, KCP, KS, *rest) = WF.tables()
    MAXK = rest[5]
    for i, key in enumerate(W.special_cases()):
        cps = np.array([ord(c) for c in key + "x"], np.int32)
        k = WF._special(cps, 0, len(key), SH, KCP, KS, MAXK)
        assert k >= 0 and "".join(map(chr, KCP[KS[k]:KS[k + 1]])) == key, key
        near = WF._special(cps, 0, len(key) + 1, SH, KCP, KS, MAXK)
        assert near < 0 or "".join(map(chr, KCP[KS[near]:KS[near + 1]])) == key + "x"


def _every_chunk_through_the_splitter():
    """word_spans without its shortcuts: every whitespace-free chunk through _chunk."""
    from algorithms.jit import njit

    @njit
    def words(cps, F, T, ts, te, sufs, cand, tmp_s, tmp_e):
        n = 0
        i = 0
        while i < cps.shape[0]:
            while i < cps.shape[0] and (F[cps[i]] & WF.F_SPACE):
                i += 1
            j = i
            while j < cps.shape[0] and not (F[cps[j]] & WF.F_SPACE):
                j += 1
            if j > i:
                n = WF._chunk(cps, i, j, F, T, ts, te, n, sufs, cand, tmp_s, tmp_e)
            i = j
        return n
    return words


def test_word_shortcuts_cut_as_the_splitter_does():
    """word_spans cuts a chunk of letters, one character, or a word of letters or digits
    between ASCII marks ("(see", "word,", "1990.") itself; each gives exactly the words
    of the full splitter (_chunk): every character of Unicode alone, and every pair of
    ASCII marks around words, numbers and spaCy's special cases."""
    F, T = WF.tables()
    marks = [""] + [chr(c) for c in range(33, 127) if not chr(c).isalnum()]
    cores = ["a", "I", "s", "word", "Word", "WORD", "AB", "aB", "Ab", "5", "10", "1990",
             "km", "C", "F", "US", "x", "e", "g", "ÄÖ", "ä", "αβγ", "ΑΒ", "кир", "中文"]
    cores += [k for k in W.special_cases() if k.isalnum()]
    cores += ["".join(c for c in k if c.isalnum()) for k in W.special_cases()]
    chunks = [chr(c) for c in range(1, 0x110000)
              if not chr(c).isspace() and not 0xD800 <= c < 0xE000]
    chunks += [a + c + b for c in cores if c for a in marks for b in marks]
    chunks += list(W.special_cases()) + [a + k + b for k in W.special_cases()
                                         for a in ("(", '"', "") for b in (".", ",", ")", "")]
    cps = np.array([ord(c) for c in " ".join(chunks)], np.int32)
    cap = len(cps) + 2
    out = []
    for fn in (WF.word_spans, _every_chunk_through_the_splitter()):
        ts, te = np.empty(cap, np.int64), np.empty(cap, np.int64)
        bufs = (np.empty(cap, np.int64), np.empty(cap * 12, np.int64),
                np.empty(cap, np.int64), np.empty(cap, np.int64))
        if fn is WF.word_spans:
            n = fn(cps, 0, len(cps), F, T, ts, te, *bufs)
        else:
            n = fn(cps, F, T, ts, te, *bufs)
        out.append((ts[:n].copy(), te[:n].copy()))
    (fs, fe), (rs, re) = out
    assert len(fs) == len(rs) and np.array_equal(fs, rs) and np.array_equal(fe, re)
    assert len(fs) > len(chunks)          # marks were cut off, somewhere


def test_words_are_spacys_english_tokens():
    from datatrove.utils.text import split_into_words
    texts, langs, _ = sample()
    for t, lang in zip(texts, langs):
        if lang == "en":
            assert list(W.words(t)) == split_into_words(t, "eng")
    for t in EDGE:
        if not any(map(W.is_cjk, t)):
            assert list(W.words(t)) == split_into_words(t, "eng"), t[:80]


def test_special_cases_are_spacys_table():
    import spacy
    from spacy.symbols import ORTH
    rules = spacy.blank("en").tokenizer.rules
    ours = json.loads((ROOT / "algorithms" / "spacy_en_special_cases.json").read_text())["cases"]
    assert ours == {k: [t[ORTH] for t in v] for k, v in rules.items()}


def test_character_lists_are_spacys():
    from gen_spacy_special_cases import letter_ranges
    from spacy.lang.char_classes import (LIST_CURRENCY, LIST_HYPHENS, LIST_PUNCT, LIST_QUOTES,
                                         LIST_UNITS)

    def chars(items):
        return {c.replace("\\", "") for c in items} - {""}
    assert chars(LIST_PUNCT) == set(W.PUNCT_CHARS) | {"……"}
    assert chars(LIST_QUOTES) == set(W.QUOTE_CHARS)
    assert chars(LIST_CURRENCY) == set(W.CURRENCY_CHARS) | {"US$", "C$", "A$"}
    assert LIST_UNITS == W.UNITS and tuple(LIST_HYPHENS) == W.HYPHENS
    data = json.loads((ROOT / "algorithms" / "spacy_en_special_cases.json").read_text())
    assert letter_ranges() == {k: data[k] for k in ("alpha", "alpha_lower", "alpha_upper", "icon")}

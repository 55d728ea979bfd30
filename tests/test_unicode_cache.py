"""The per-code-point tables cached on disk are the ones Python's str methods give."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from algorithms import (cleaning_fast, minhash_fast, packing_fast, quality_signals_fast,
                        unicode_cache, words_fast)


def test_cached_tables_equal_a_fresh_build(tmp_path, monkeypatch):
    alnum, space = cleaning_fast.tables()
    want = np.fromiter((chr(i).isalnum() for i in range(0x110000)), np.bool_, count=0x110000)
    assert np.array_equal(alnum, want)
    assert np.array_equal(space, [chr(i).isspace() for i in range(0x110000)])
    assert np.array_equal(minhash_fast._char_map(), minhash_fast._build_char_map())
    # the GPT-2 split's classes: the regex package's, then the code points HF does not know
    classes = packing_fast._regex_classes()
    for lo, hi in packing_fast.UNKNOWN_TO_HF:
        classes[lo:hi + 1] = packing_fast.OTHER
    assert np.array_equal(packing_fast.codepoint_classes(), classes)
    # a table is written once, then read back as it was
    calls = []
    monkeypatch.setattr(unicode_cache, "__file__", str(tmp_path / "unicode_cache.py"))
    build = lambda: calls.append(1) or np.arange(5)  # noqa: E731
    assert unicode_cache.cached_table("t", build).tolist() == [0, 1, 2, 3, 4]
    assert unicode_cache.cached_table("t", build).tolist() == [0, 1, 2, 3, 4]
    assert calls == [1] and list((tmp_path / "__pycache__").glob("t-py*-unicode*.npy"))


def test_quality_flags_are_cached_and_rebuilt_when_their_rules_change(tmp_path, monkeypatch):
    # the cached tables are the ones _flag_table builds
    fresh = quality_signals_fast._flag_table()
    cached = quality_signals_fast._cached_flag_table()
    for a, b in zip(fresh, cached):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    fresh, cached = words_fast._flag_table(), words_fast.cached_flag_table()
    assert fresh.dtype == cached.dtype and np.array_equal(fresh, cached)
    # in a copy of the files it depends on: built once, read back, built again when
    # spaCy's table (one of those files) changes
    src = Path(quality_signals_fast.__file__).parent
    for name in ("quality_signals.py", "quality_signals_fast.py", "words.py", "words_fast.py",
                 "spacy_en_special_cases.json"):
        shutil.copy(src / name, tmp_path / name)
    monkeypatch.setattr(quality_signals_fast, "__file__",
                        str(tmp_path / "quality_signals_fast.py"))
    monkeypatch.setattr(words_fast, "__file__", str(tmp_path / "words_fast.py"))
    monkeypatch.setattr(unicode_cache, "__file__", str(tmp_path / "unicode_cache.py"))
    builds = []
    tiny = (np.array([7], np.uint32), np.array([-1], np.int32))
    monkeypatch.setattr(quality_signals_fast, "_flag_table", lambda: builds.append(1) or tiny)
    for _ in range(2):
        f, lower = quality_signals_fast._cached_flag_table()
        assert f.tolist() == [7] and lower.tolist() == [-1]
    assert builds == [1]
    with open(tmp_path / "spacy_en_special_cases.json", "a") as out:
        out.write(" ")
    quality_signals_fast._cached_flag_table()
    assert builds == [1, 1] and len(list((tmp_path / "__pycache__").glob("quality-flags-*"))) == 2

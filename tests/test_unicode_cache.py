"""The per-code-point tables cached on disk are the ones Python's str methods give."""

from __future__ import annotations

import numpy as np

from algorithms import cleaning, cleaning_fast, minhash_fast, unicode_cache


def test_cached_tables_equal_a_fresh_build(tmp_path, monkeypatch):
    alnum, space = cleaning_fast.tables()
    want = np.fromiter((chr(i).isalnum() for i in range(0x110000)), np.bool_, count=0x110000)
    assert np.array_equal(alnum, want) and np.array_equal(cleaning.alnum_table(), want)
    assert np.array_equal(space, [chr(i).isspace() for i in range(0x110000)])
    assert np.array_equal(minhash_fast._char_map(), minhash_fast._build_char_map())
    # a table is written once, then read back as it was
    calls = []
    monkeypatch.setattr(unicode_cache, "__file__", str(tmp_path / "unicode_cache.py"))
    build = lambda: calls.append(1) or np.arange(5)  # noqa: E731
    assert unicode_cache.cached_table("t", build).tolist() == [0, 1, 2, 3, 4]
    assert unicode_cache.cached_table("t", build).tolist() == [0, 1, 2, 3, 4]
    assert calls == [1] and list((tmp_path / "__pycache__").glob("t-py*-unicode*.npy"))

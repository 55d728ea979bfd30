"""algorithms.arrays builds and reads the same arrays as pyarrow's own calls, without
importing pandas."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from algorithms.arrays import from_numpy, strings, to_numpy

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.int64, np.uint32,
                                   np.uint64, np.float32, np.float64])
def test_from_numpy_equals_pa_array(dtype):
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 1000):
        v = (rng.random(n) * 100).astype(dtype)
        assert from_numpy(v).equals(pa.array(v))
        mask = rng.random(n) < 0.3
        assert from_numpy(v, mask=mask).equals(pa.array(v, mask=mask))
        assert from_numpy(v, pa.float64()).equals(pa.array(v.astype(np.float64)))


def test_strings_equals_pa_array():
    vals = ["", "a", "héllo wörld", None, "x" * 1000, "日本語"]
    assert strings(vals).equals(pa.array(vals, pa.string()))
    assert strings([]).equals(pa.array([], pa.string()))
    assert strings(["a", "b"]).null_count == 0


def test_to_numpy_equals_pyarrow():
    rng = np.random.default_rng(1)
    for typ, v in [(pa.int64(), rng.integers(-5, 5, 100)), (pa.float64(), rng.random(100)),
                   (pa.int32(), rng.integers(0, 9, 100)), (pa.bool_(), rng.random(100) < .5)]:
        a = pa.array(v, typ)
        for piece in (a, a.slice(3), a.slice(5, 17), a.slice(100)):
            got = to_numpy(piece)
            assert got.dtype == piece.to_numpy(zero_copy_only=False).dtype
            np.testing.assert_array_equal(got, piece.to_numpy(zero_copy_only=False))
        chunked = pa.chunked_array([a.slice(0, 10), a.slice(10, 5), a.slice(15)])
        np.testing.assert_array_equal(to_numpy(chunked), v)
    assert to_numpy(pa.chunked_array([], pa.int64())).shape == (0,)


def test_to_numpy_nulls():
    a = pa.array([1.5, None, 3.0, None], pa.float64())
    np.testing.assert_array_equal(to_numpy(a, null=np.nan), [1.5, np.nan, 3.0, np.nan])
    np.testing.assert_array_equal(to_numpy(a.slice(1), null=-1.0), [-1.0, 3.0, -1.0])
    ints = pa.array([None, 2, None, 4, 5, None, 7, 8, 9], pa.int64())
    np.testing.assert_array_equal(to_numpy(ints.slice(2), null=0), [0, 4, 5, 0, 7, 8, 9])
    with pytest.raises(ValueError, match="2 nulls"):
        to_numpy(a)
    with pytest.raises(TypeError, match="not a column of numbers"):
        to_numpy(pa.array(["a"]))


def _fresh_python(code: str) -> str:
    """Run code in a new interpreter at the repository root; what it printed."""
    cp = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.strip()


def test_no_pandas_import():
    code = ("import sys, numpy as np, pyarrow as pa\n"
            "from algorithms.arrays import combine, from_numpy, strings, to_numpy\n"
            "a = from_numpy(np.arange(5)); b = from_numpy(np.ones(5, bool), mask=np.zeros(5, bool))\n"
            "s = strings(['a', None]); x = to_numpy(pa.chunked_array([a, a])); y = to_numpy(b)\n"
            "t = pa.table({'a': a}).filter(b)\n"
            "e = combine(pa.chunked_array([], pa.string())); z = to_numpy(pa.chunked_array([], pa.int64()))\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n"
            "pa.chunked_array([], pa.string()).combine_chunks()\n"
            "print('pandas' in sys.modules)\n")
    # the check itself can fail: pyarrow's own call does import pandas here
    assert _fresh_python(code) == "True"


def test_exact_digests_of_special_texts_import_no_pandas():
    """dedup_exact leaves a text holding a character whose lower case is longer ("İ") to
    the readable digest; picking those rows out of the batch imports no pandas either."""
    code = ("import sys\n"
            "from algorithms.arrays import strings\n"
            "from algorithms import exact_dedup, exact_dedup_fast\n"
            "texts = ['İstanbul  ve Ankara', 'plain text', None]\n"
            "got = exact_dedup_fast.batch_digests(strings(texts))\n"
            "assert got == [exact_dedup.digest(t) for t in texts], 'digests differ'\n"
            "print('pandas' in sys.modules)\n")
    assert _fresh_python(code) == "False"


def test_combine():
    from algorithms.arrays import combine
    a, b = pa.array(["x", None]), pa.array(["y"])
    assert combine(a) is a
    assert combine(pa.chunked_array([a])).equals(a)
    assert combine(pa.chunked_array([a, b])).to_pylist() == ["x", None, "y"]
    e = combine(pa.chunked_array([], pa.large_string()))
    assert isinstance(e, pa.Array) and len(e) == 0 and e.type == pa.large_string()


def test_fill_empty():
    from algorithms.arrays import fill_empty
    a = pa.array(["x", None, ""], pa.string())
    assert fill_empty(a).to_pylist() == ["x", "", ""]
    c = pa.chunked_array([a, pa.array([None], pa.string())])
    assert fill_empty(c).to_pylist() == ["x", "", "", ""]
    ok = pa.array(["a"], pa.string())
    assert fill_empty(ok) is ok


def test_no_stage_imports_pandas(layout_copy, tmp_path):
    """Every stage, first runs and reruns, driver and workers: no process imports pandas
    (it would cost each ~0.3 s, a tenth of a rerun), nor the Hugging Face hub's client,
    which datatrove's executor would import (0.13-0.15 s; pipeline/datatrove_import.py)
    and which only a download from the hub uses."""
    from conftest import ALL_STAGES, run_watching_imports, stage_args

    runs = [(s, stage_args(layout_copy, s, "--workers", "2")) for s, *_ in ALL_STAGES]
    runs += [("download_data.py", ["--dataset", "sample", "--output", tmp_path / "raw",
                                   "--workers", "2"]),   # a first run: layout_copy's is done
             ("verify.py", ["--input", layout_copy, "--output", tmp_path / "verify.md"]),
             ("clean.py", stage_args(layout_copy, "clean.py", "--min-chars", "300")),
             ("clean.py", stage_args(layout_copy, "clean.py", "--sweep", "min_chars=100,400")),
             ("dedup_minhash.py", stage_args(layout_copy, "dedup_minhash.py", "--threshold", "0.85"))]
    for script, args in runs:
        assert run_watching_imports(script, args, "pandas,huggingface_hub.hf_api",
                                    tmp_path) == "", script


def test_strings_past_one_array_are_chunked():
    vals = ["abc", None, "defgh", "", "ij", "klmnopq", "r"]
    got = strings(vals, max_bytes=6)
    assert isinstance(got, pa.ChunkedArray) and got.num_chunks > 1
    assert got.to_pylist() == vals and got.type == pa.string()
    assert all(sum(len(v or "") for v in c.to_pylist()) <= 6 or len(c) == 1 for c in got.chunks)
    assert strings(vals, max_bytes=1).to_pylist() == vals     # a longer text is a chunk alone
    assert isinstance(strings(vals), pa.Array)

"""The kernels built ahead of time (algorithms/jit.py, scripts/compile_kernels.py): a call
runs the build only when its argument types are exactly one built version's, a build
that does not match this source, numba, Python or CPU is never used, a stage whose
kernels are all built runs without numba, and the builds give numba's results (the
sample's outputs byte for byte, both ways)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import output_digests as od  # noqa: E402

from algorithms import jit  # noqa: E402

RECORD = Path(__file__).parent / "data" / "sample_digests.json"
KERNEL_MODULES = ["bpe_trainer", "cleaning_fast", "decontamination_fast", "exact_dedup_fast",
                  "kernels", "langid_fast", "minhash_fast", "packing_fast", "quality_signals_fast",
                  "tokenizer_sample_fast", "words_fast"]


def _records() -> dict:
    return {m: json.loads(jit.build_record(m).read_text()) for m in KERNEL_MODULES
            if jit.build_record(m).exists()}


def test_every_kernel_module_is_built_where_a_c_compiler_is():
    """make install built every module (the stages then never import numba); without a
    C compiler there is nothing to test here, and the stages compile on first use."""
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the kernels are compiled by numba on first use")
    assert jit.kernel_modules() == KERNEL_MODULES
    records = _records()
    assert sorted(records) == KERNEL_MODULES
    assert all(jit.aot_usable(r) for r in records.values()), \
        "a build is stale: run `make install` (scripts/compile_kernels.py)"
    # the stages' main kernels are among the built versions
    exports = {m: set(r["exports"]) for m, r in records.items()}
    for module, kernel in [("langid_fast", "_predict_batch"), ("cleaning_fast", "_scan"),
                           ("minhash_fast", "_sig_utf8_texts"),
                           ("bpe_trainer", "_train_merges"), ("packing_fast", "_encode_docs"),
                           ("exact_dedup_fast", "_normalise_docs")]:
        assert kernel in exports[module], (module, kernel)


Pair = namedtuple("Pair", ["left", "right", "n"])


def test_a_values_key_is_its_numba_types_key():
    """arg_key tells apart exactly what numba's typeof does, for every kind of argument
    the kernels take: the key of a value and the key of its numba type are equal."""
    numba = jit.load_numba()
    ro = np.arange(8, dtype=np.uint8)
    ro.flags.writeable = False
    values = [np.zeros(3, np.uint8), ro, np.zeros(3, np.int32), np.zeros(3, np.int64),
              np.zeros(3, np.uint32), np.zeros(3, np.uint64), np.zeros(3, np.float32),
              np.zeros(3, np.float64), np.zeros(3, np.bool_), np.zeros((3, 4), np.int32),
              np.zeros((3, 4), np.int64)[:, 1], np.zeros((3, 4), np.int64, order="F"),
              np.zeros(0, np.int64), 7, -1, 2 ** 63, 1.5, True, np.uint64(3), np.int64(3),
              np.float32(1), np.uint32(2), np.bool_(False),
              Pair(np.zeros(2, np.int32), np.zeros(2, np.float32), 4),
              (np.zeros(2, np.int64), np.zeros(2, np.int64))]
    for v in values:
        assert jit._value_key(v) == jit.type_key(numba.typeof(v)), (v, numba.typeof(v))


def test_a_build_that_does_not_match_is_never_used(monkeypatch):
    records = _records()
    if not records:
        pytest.skip("no ahead-of-time build here (no C compiler)")
    record = next(iter(records.values()))
    assert jit.aot_usable(record)
    for key, other in [("sources", "0" * 64), ("cpu", "0" * 64), ("numba", "0.1.0"),
                       ("python", "cpython-399"), ("version", -1)]:
        assert not jit.aot_usable({**record, key: other}), key
    monkeypatch.setenv("DATAPREP_AOT", "0")
    assert not jit.aot_usable(record)
    monkeypatch.delenv("DATAPREP_AOT")
    # numba told to compile for another CPU (tests/test_isa.py): its compiler, not the build
    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")
    assert not jit.aot_usable(record)
    monkeypatch.delenv("NUMBA_CPU_NAME")
    assert jit.aot_usable(record)


GUARD = r"""
import sys
import numpy as np
from algorithms import exact_dedup_fast as f
from algorithms.jit import _aot_versions, arg_key
assert _aot_versions(f._normalise_docs), "no build"
text = "  Hello\tWORLD  ünïcode ".encode()
out, off, special = np.empty(64, np.uint8), np.empty(2, np.int64), np.zeros(1, np.bool_)
# the built types: the build runs, numba is not imported
f._normalise_docs(np.frombuffer(text, np.uint8).copy(), np.array([0, len(text)], np.int64),
                  f._char_map(), out, off, special)
first = bytes(out[:off[1]])
print("numba" in sys.modules)
# offsets of a width no build has (the build would read them as int64 and crash), so numba
# compiles the kernel for them, with the same answer
out2, off2 = np.empty(64, np.uint8), np.empty(2, np.int64)
for dtype in (np.int32, np.uint32, np.int16, np.uint16, np.uint64, np.int8):
    args = (np.frombuffer(text, np.uint8).copy(), np.array([0, len(text)], dtype),
            f._char_map(), out2, off2, special)
    if f._normalise_docs.built(args) is None:
        break
f._normalise_docs(*args)
print("numba" in sys.modules, bytes(out2[:off2[1]]) == first, first.decode())
"""


def test_other_argument_types_go_to_numba_with_the_same_answer(tmp_path):
    if "exact_dedup_fast" not in _records():
        pytest.skip("no ahead-of-time build here (no C compiler)")
    # numba's cache of what this test compiles goes to a folder of its own, so that the
    # next install does not build that type too
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("DATAPREP_AOT", None)
    cp = subprocess.run([sys.executable, "-c", GUARD], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert cp.stdout.splitlines() == ["False", "True True hello world ünïcode"]


# a stage run with numba made unimportable: `import numba` raises ImportError in the stage
# and in the workers it forks
NO_NUMBA = r"""
import runpy, sys
sys.modules["numba"] = None
script, *args = sys.argv[1:]
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")
"""


def test_the_stages_run_without_numba_where_every_kernel_is_built(tmp_path):
    """Each stage on the bundled sample, two workers, with numba unimportable: every
    kernel a default run calls was built ahead of time (a call that needed numba would
    fail the run)."""
    records = _records()
    if sorted(records) != KERNEL_MODULES or not all(map(jit.aot_usable, records.values())):
        pytest.skip("the kernels are not all built ahead of time here (no C compiler)")
    d = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DATAPREP_AOT", None)
    steps = [
        ["download_data.py", "--dataset", "sample", "--output", d / "raw"],
        ["clean.py", "--input", d / "raw", "--output", d / "cleaned"],
        ["dedup_exact.py", "--input", d / "cleaned", "--output", d / "dedup_exact"],
        ["dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / "dedup"],
        ["train_tokenizer.py", "--input", d / "dedup", "--output", d / "tokenizer",
         "--vocab-size", "2000"],
        ["pack_parallel.py", "--input", d / "dedup", "--tokenizer",
         d / "tokenizer" / "tokenizer.json", "--output", d],
    ]
    for step in steps:
        cp = subprocess.run([sys.executable, "-c", NO_NUMBA, *map(str, step), "--workers", "2"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert cp.returncode == 0, (step[0], cp.stderr[-2000:])
    assert (d / "train.bin").stat().st_size > 0


def test_numbas_kernels_give_the_sample_outputs_byte_for_byte(tmp_path, monkeypatch):
    """tests/test_outputs_unchanged.py runs the built kernels (the default); this runs
    numba's (DATAPREP_AOT=0): both give the record's bytes."""
    monkeypatch.setenv("DATAPREP_AOT", "0")
    got = od.run_all(tmp_path / "data", sample=True, corpus_mb=None, workers=2)
    diff = od.differences(json.loads(RECORD.read_text()), got)
    assert all(got[s]["files"] for s in got)
    assert not diff, "\n".join(diff[:20])

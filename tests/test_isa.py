"""The compiled kernels built for an AVX2 CPU without AVX-512 give what the host's build
gives: dedup_exact's digests, the compiled BPE trainer's tokenizer.json, the compiled
encoder's ids and the decontaminate rule's n-gram counts. (MinHash has its own test in test_minhash_kernel.py.) The benchmark
machine has AVX-512; users' machines often do not, and a kernel can vectorise
differently for another CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, {root!r})
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from algorithms import bpe_trainer, exact_dedup_fast
from algorithms.jit import njit, numba
from algorithms.packing_fast import BpeEncoder

texts = [t for t in pq.read_table({sample!r}, columns=["text"]).column("text").to_pylist() if t]
texts = texts[:400] + ["  Ünïcödé   TEXT\twith\u00a0spaces ", "中文 文本。", "", "ΣΑΣ ΣΟΦΟΣ", "İstanbul"]
digests = exact_dedup_fast.batch_digests(pa.array(texts, pa.string()))
tok = bpe_trainer.train_fast([texts[:200], texts[200:400]], 1200, 0, threads=1)
enc = BpeEncoder.from_tokenizer(tok)
ids = enc.pack(texts, 0)
from algorithms import decontamination, decontamination_fast
index = decontamination.build_index([(None, t) for t in texts[:100:7]], 8)
counts = decontamination_fast.matched_ngrams(pa.array(texts, pa.string()), index)
assert counts.sum() > 0
fresh = njit(exact_dedup_fast._normalise_docs.py_func)   # cached code cannot be inspected
data = np.frombuffer(b"Ab  c", np.uint8)
fresh(data, np.array([0, 5], np.int64), exact_dedup_fast._char_map(), np.empty(16, np.uint8),
      np.empty(2, np.int64), np.zeros(1, np.bool_))
asm = fresh.inspect_asm(fresh.signatures[0])
print(json.dumps({{"cpu": numba.config.CPU_NAME, "zmm": "zmm" in asm,
                   "digests": hashlib.sha256(b"".join(digests)).hexdigest(),
                   "tokenizer": hashlib.sha256(tok.to_str().encode()).hexdigest(),
                   "ids": hashlib.sha256(np.asarray(ids, np.int64).tobytes()).hexdigest(),
                   "decont": hashlib.sha256(counts.tobytes()).hexdigest()}}))
"""


def run_child(env: dict) -> dict:
    code = CHILD.format(root=str(ROOT), sample=str(ROOT / "data" / "sample" / "sample.parquet"))
    cp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        timeout=900)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return json.loads(cp.stdout.strip().splitlines()[-1])


def test_avx2_build_of_the_kernels_gives_the_hosts_results():
    host = run_child(dict(os.environ))
    # NUMBA_CPU_NAME alone keeps the host's feature list (AVX-512 included); an empty
    # NUMBA_CPU_FEATURES takes the named CPU's own features: AVX2, no AVX-512
    avx2 = run_child(dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=""))
    assert avx2["cpu"] == "haswell" and not avx2["zmm"]
    for what in ("digests", "tokenizer", "ids", "decont"):
        assert avx2[what] == host[what], what

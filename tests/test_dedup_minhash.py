"""dedup_minhash.py: the MinHash kernel, LSH by sorting, verification, clusters, and the
stage on the bundled sample checked against brute-force exact Jaccard."""

from __future__ import annotations

import json
import random
import shutil
import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE, run_script

from algorithms import minhash as dm
from algorithms import minhash_fast as fast
from algorithms.exact_dedup import normalise


# --------------------------------------------------------------------------------------
# Brute force: exact Jaccard of 5-character shingle sets, every pair (sparse product).
# --------------------------------------------------------------------------------------

def exact_shingles(text: str, n: int = 5) -> set[str]:
    t = normalise(text)
    return {t} if len(t) < n else {t[i:i + n] for i in range(len(t) - n + 1)}


def all_pairs_jaccard(texts: list[str]) -> dict[tuple[int, int], float]:
    """{(i, j): J} for every pair i < j sharing at least one shingle."""
    import scipy.sparse as sp

    vocab: dict[str, int] = {}
    rows, cols = [], []
    sizes = []
    for i, t in enumerate(texts):
        s = exact_shingles(t)
        sizes.append(len(s))
        for g in s:
            rows.append(i)
            cols.append(vocab.setdefault(g, len(vocab)))
    x = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), len(vocab)))
    inter = (x @ x.T).tocoo()
    m = inter.row < inter.col
    r, c, v = inter.row[m], inter.col[m], inter.data[m]
    sizes = np.array(sizes)
    j = v / (sizes[r] + sizes[c] - v)
    return {(int(a), int(b)): float(q) for a, b, q in zip(r, c, j)}


# --------------------------------------------------------------------------------------
# The kernel.
# --------------------------------------------------------------------------------------

def test_signature_estimates_jaccard_and_follows_normalisation():
    mh = dm.MinHasher(num_perm=256)
    rng = random.Random(0)
    words = [f"w{rng.randrange(3000)}" for _ in range(600)]
    a = " ".join(words)
    b = " ".join(words[:500] + [f"x{i}" for i in range(100)])
    true = len(exact_shingles(a) & exact_shingles(b)) / len(exact_shingles(a) | exact_shingles(b))
    sa, sb = mh.signatures([a, b])
    est = float(dm.similarity(sa, sb))
    # 3 standard errors of a k=256 estimate
    assert abs(est - true) < 3 * np.sqrt(true * (1 - true) / 256) + 1e-9
    # whitespace runs and case do not matter; one changed character does
    assert (mh.signature("Hello   World\n again") == mh.signature("hello world again")).all()
    assert not (mh.signature("hello world again") == mh.signature("hello world agaim")).all()
    assert sa.dtype == np.uint32 and sa.shape == (256,)


def test_first_k_functions_do_not_depend_on_num_perm():
    s16 = dm.MinHasher(16).signature("a quick brown fox jumps")
    s256 = dm.MinHasher(256).signature("a quick brown fox jumps")
    assert (s16 == s256[:16]).all()


def test_texts_shorter_than_a_shingle_still_get_a_signature():
    mh = dm.MinHasher()
    sig, lens = mh.signatures_and_lengths(["ab", "AB  ", "abc", "", None, "hello world"])
    assert list(lens) == [2, 2, 3, 0, 0, 11]
    assert (sig != fast.EMPTY).all()                 # every text hashed, none skipped
    assert (sig[0] == sig[1]).all()                # "AB  " normalises to "ab"
    assert not (sig[0] == sig[2]).all()
    assert (sig[3] == sig[4]).all()                # empty and null are the same empty text


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50])
def test_normalised_pieces_join_to_normalise(size):
    rng = random.Random(size)
    alphabet = ["a", "B", "ç", "中", "İ", " ", "\n", "\t", "\u3000", "  ", "\x1c"]
    for _ in range(300):
        t = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        assert "".join(fast.normalised_pieces(t, size)) == normalise(t), repr(t)
    # Greek final sigma depends on the next character: cuts at whitespace keep it right
    greek = " ".join(rng.choice(["ΟΔΟΣ", "ΣΟΦΟΣ", "ΚΟΣΜΟΣ", "Σ"]) for _ in range(200))
    assert "".join(fast.normalised_pieces(greek, max(size, 7))) == normalise(greek)


def _peak(fn):
    tracemalloc.start()
    try:
        res = fn()
        return res, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_multi_megabyte_text_in_pieces_equals_whole_text_and_bounded_memory():
    rng = random.Random(1)
    words = ["Data", "engineering", "中文", "语料", "dedup", "MinHash", "shingle", "band"]
    text = " ".join(rng.choice(words) + ("\n" if rng.random() < 0.1 else "") for _ in range(450_000))
    assert len(text) > 2_500_000 > 8 * fast.LONG_TEXT
    mh = dm.MinHasher()
    # the whole normalised text through the kernel at once ...
    cp, off = fast._code_points([normalise(text)])
    whole = mh.empty(1)
    fast._sig_texts(cp, off, mh.n, mh.a, mh.b, whole)
    del cp
    # ... equals the piecewise path the stage takes for long texts
    (sig, lens), peak = _peak(lambda: mh.signatures_and_lengths([text]))
    assert (sig[0] == whole[0]).all()
    assert lens[0] == len(normalise(text))
    # memory is bounded by the piece size, not the text: twice the text, same peak
    double = text + " " + text
    _, peak2 = _peak(lambda: mh.signatures_and_lengths([double]))
    assert peak < 64 * fast.LONG_TEXT, peak
    assert peak2 < 1.2 * peak + 2**20, (peak, peak2)


# --------------------------------------------------------------------------------------
# LSH buckets and union-find.
# --------------------------------------------------------------------------------------

def test_bucket_pairs_by_sorting():
    h = np.array([5, 7, 5, 9, 7, 5], dtype=np.uint64)
    pairs = {tuple(p) for p in dm.bucket_pairs(h).tolist()}
    assert pairs == {(0, 2), (0, 5), (2, 5), (1, 4)}
    # a big bucket stays linear: first member + predecessor edges, still connected
    big = dm.bucket_pairs(np.zeros(1000, dtype=np.uint64), all_pairs_max=64)
    assert len(big) < 2 * 1000
    root = dm.union_find(1000, big)
    assert (root == 0).all()


def test_union_find_root_is_smallest_index():
    edges = np.array([[5, 9], [9, 3], [7, 8], [1, 1]], dtype=np.int64)
    root = dm.union_find(10, edges)
    assert root.tolist() == [0, 1, 2, 3, 4, 3, 6, 7, 7, 3]


def _components_reference(n, edges):
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for u, v in edges.tolist():
        ru, rv = find(u), find(v)
        parent[max(ru, rv)] = min(ru, rv)
    return [find(x) for x in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_union_find_matches_a_plain_union_find(seed):
    rng = np.random.default_rng(seed)
    n = 2000
    edges = rng.integers(0, n, size=(int(rng.integers(1, 3000)), 2))
    chain = np.stack([np.arange(n - 1, 1000, -1), np.arange(n - 2, 999, -1)], axis=1)
    edges = np.concatenate([edges, chain])   # a long chain, listed from its far end
    assert dm.union_find(n, edges).tolist() == _components_reference(n, edges)


def test_band_hashes_and_candidate_probability():
    sig = dm.MinHasher().signatures(["the same text here", "the same text here", "something else"])
    h = dm.band_hashes(sig, 16, 8)
    assert h.shape == (16, 3) and h.dtype == np.uint64
    assert (h[:, 0] == h[:, 1]).all() and not (h[:, 0] == h[:, 2]).any()
    assert round(float(dm.candidate_probability(0.8, 16, 8)), 3) == 0.947
    with pytest.raises(ValueError):
        dm.band_hashes(sig, 16, 4)


# --------------------------------------------------------------------------------------
# The stage.
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_run(sample_layout, tmp_path_factory):
    """dedup_minhash straight on the raw sample (exact and near duplicates both in)."""
    out = tmp_path_factory.mktemp("mh") / "dedup"
    cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", out,
                    "--workers", "2")
    return out, cp


def clusters_from_report(out, ids: list[str]) -> dict[str, str]:
    """doc id -> id of the document kept for its cluster (itself when kept)."""
    rem = pq.read_table(out / "report" / "removed.parquet").to_pylist()
    kept = {i: i for i in ids}
    for r in rem:
        kept[r["id"]] = r["kept_id"]
    return kept


def test_quality_against_brute_force_exact_jaccard(sample_run):
    out, cp = sample_run
    t = pq.read_table(SAMPLE, columns=["id", "text", "planted", "dup_of", "jaccard"]).to_pylist()
    ids = [r["id"] for r in t]
    jac = all_pairs_jaccard([r["text"] for r in t])
    # the brute force agrees with the sample's own labels
    pos = {i: n for n, i in enumerate(ids)}
    for r in t:
        if r["dup_of"]:
            a, b = sorted((pos[r["id"]], pos[r["dup_of"]]))
            assert jac.get((a, b), 0.0) == pytest.approx(r["jaccard"], abs=1e-6)

    cluster = clusters_from_report(out, ids)
    truth = [(a, b) for (a, b), j in jac.items() if j >= 0.85]
    assert len(truth) >= 70          # 30 exact + 48 planted near duplicates, at least
    found = sum(cluster[ids[a]] == cluster[ids[b]] for a, b in truth)
    recall = found / len(truth)
    assert recall >= 0.95, recall

    # every pair of documents merged into one cluster: none below 0.7 true Jaccard
    members: dict[str, list[int]] = {}
    for n, i in enumerate(ids):
        members.setdefault(cluster[i], []).append(n)
    merged = [(a, b) for m in members.values() if len(m) > 1
              for x, a in enumerate(m) for b in m[x + 1:]]
    assert merged
    low = [(ids[a], ids[b], jac.get((a, b), 0.0)) for a, b in merged if jac.get((a, b), 0.0) < 0.7]
    assert low == []
    # the planted low-similarity pairs (J 0.5-0.7) were candidates at most, never merged
    for r in t:
        if r["planted"] == "near_dup_low":
            assert cluster[r["id"]] != cluster[r["dup_of"]]


def test_stage_report_and_counts(sample_run):
    out, cp = sample_run
    m = json.loads((out / "manifest.json").read_text())
    c = m["counts"]
    assert c["docs_in"] == c["docs_out"] + sum(c["removed"].values())
    assert c["bytes_out"] < c["bytes_in"]
    assert c["candidates_rejected"] > 0              # verification did reject something
    assert c["candidates"] >= c["removed"]["near_duplicate"]
    assert m["config"]["bands"] * m["config"]["rows"] == m["config"]["num_perm"] == 128
    rem = pq.read_table(out / "report" / "removed.parquet")
    assert {"id", "kept_id", "similarity"} <= set(rem.column_names)
    assert rem.num_rows == c["removed"]["near_duplicate"]
    assert min(rem.column("similarity").to_pylist()) >= 0.5
    assert "largest clusters" in cp.stdout and "cluster 1:" in cp.stdout
    assert "rejected: similarity < 0.8" in cp.stdout
    stats = json.loads((out / "report" / "dedup_minhash_stats.json").read_text())
    assert len(stats["largest_clusters"]) == 5
    # the kept document of each cluster is the first in corpus order
    order = {i: n for n, i in enumerate(pq.read_table(SAMPLE, columns=["id"]).column("id").to_pylist())}
    assert all(order[k] < order[r] for k, r in zip(rem.column("kept_id").to_pylist(),
                                                   rem.column("id").to_pylist()))
    assert len(list(out.glob("*.parquet"))) == m["counts"]["docs_in"] // 400 + 1 == len(m["files"])
    assert not (out / "_work").exists()


@pytest.fixture
def tiny_raw(tmp_path):
    """A raw folder (with manifest) holding tiny texts and a near-duplicate long text pair."""
    rng = random.Random(3)
    words = [f"word{i}" for i in range(5000)]
    long_a = " ".join(rng.choice(words) for _ in range(300_000))   # ~2.8 MB
    long_b = long_a.replace("word17 ", "WORD-17 ", 3)
    recs = [{"id": "t1", "text": "ab"}, {"id": "t2", "text": "AB  "}, {"id": "t3", "text": "abc"},
            {"id": "l1", "text": long_a}, {"id": "t4", "text": "x"}, {"id": "l2", "text": long_b}]
    recs += [{"id": f"d{i}", "text": " ".join(rng.choice(words) for _ in range(80))} for i in range(40)]
    src = tmp_path / "src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    run_script("download_data.py", "--input", src, "--output", tmp_path / "raw", "--shard-rows", "7")
    return tmp_path


def test_tiny_and_long_texts_deterministic_across_workers(tiny_raw):
    outs = []
    for w in ("1", "2"):
        out = tiny_raw / f"dedup{w}"
        run_script("dedup_minhash.py", "--input", tiny_raw / "raw", "--output", out, "--workers", w)
        outs.append(out)
    m = json.loads((outs[0] / "manifest.json").read_text())
    assert m["counts"]["short_texts"] == 4                      # ab, AB, abc, x: none skipped
    removed = pq.read_table(outs[0] / "report" / "removed.parquet").to_pylist()
    pairs = {(r["id"], r["kept_id"]) for r in removed}
    assert ("t2", "t1") in pairs and ("l2", "l1") in pairs
    assert m["counts"]["docs_out"] == 46 - len(removed)
    for f in sorted(outs[0].glob("*.parquet")):
        assert f.read_bytes() == (outs[1] / f.name).read_bytes()
    assert (outs[0] / "report" / "removed.parquet").read_bytes() == \
        (outs[1] / "report" / "removed.parquet").read_bytes()


def test_bad_flags_are_one_line_errors(sample_layout, tmp_path):
    out = tmp_path / "dedup"
    cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", out,
                    "--bands", "16", "--rows", "4", check=False)
    assert cp.returncode == 2 and "b*r == k" in cp.stderr and "Traceback" not in cp.stderr
    cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", out,
                    "--threshold", "1.5", check=False)
    assert cp.returncode == 2 and "--threshold" in cp.stderr
    cp = run_script("dedup_minhash.py", "--input", tmp_path / "nope", "--output", out, check=False)
    assert cp.returncode == 2 and "nope" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
    for flag, value, says in [("--seed", "-1", "--seed -1: must be >= 0"),
                              ("--bands", "0", "--bands 0: must be positive"),
                              # beyond what the kernel takes: a one-line error, not numba's
                              ("--ngram", str(2**64), f"--ngram {2**64}: must be at most "
                               "2**64-1 (a text shorter than a shingle is one shingle)"),
                              ("--num-perm", "1000000", "--num-perm 1000000: at most 4,096 "
                               "(every document keeps 4 bytes a hash; the tutorial uses 128)")]:
        cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", out,
                        flag, value, check=False)
        assert cp.returncode == 2 and cp.stderr.strip() == f"error: {says}", cp.stderr
    assert not out.exists()


def test_bench_smoke():
    import bench_minhash

    texts = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()[:40]
    res = bench_minhash.run(texts, quick=True)
    rows = res["rows"]
    assert {r["name"] for r in rows} >= {"ours", "datasketch"}
    for r in rows:
        assert {"name", "mb_per_s_per_core", "ratio", "target", "ok"} <= set(r)
        assert r["mb_per_s_per_core"] > 0


# -- the readable version (algorithms/minhash.py, first part) against the compiled path --

def _sample_texts(n: int, chars: int) -> list[str]:
    import pyarrow.parquet as pq
    from conftest import SAMPLE

    texts = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()[:n]
    return [t[:chars] for t in texts] + ["", "abc", "ΟΔΟΣ  ΟΔΟΣ", "   \t\n  ", "机器学习模型的训练"]


def test_readable_signature_and_bands_equal_the_compiled_ones():
    texts = _sample_texts(40, 1500)
    mh = dm.MinHasher(num_perm=16, ngram=5, seed=3)
    a, b = [int(x) for x in mh.a], [int(x) for x in mh.b]
    fast_sigs = mh.signatures(texts)
    slow_sigs = [dm.signature(t, a, b, 5) for t in texts]
    assert fast_sigs.tolist() == slow_sigs
    bands = dm.band_hashes(fast_sigs, 4, 4)
    assert all(int(bands[j, d]) == dm.band_hash(slow_sigs[d], j, 4)
               for d in range(len(texts)) for j in range(4))


def test_readable_near_duplicates_equal_the_compiled_clusters():
    import numpy as np

    rng = np.random.default_rng(5)
    base = _sample_texts(30, 800)[:30]
    texts = []
    for t in base:   # each text, and some copies with a few characters changed
        texts.append(t)
        for _ in range(int(rng.integers(0, 3))):
            chars = list(t)
            for i in rng.integers(0, max(1, len(chars)), 3):
                if chars:
                    chars[i] = "x"
            texts.append("".join(chars))
    mh = dm.MinHasher(num_perm=32, ngram=5, seed=1)
    a, b = [int(x) for x in mh.a], [int(x) for x in mh.b]
    want = dm.near_duplicates(texts, a, b, bands=8, rows=4, threshold=0.7)
    sigs = mh.signatures(texts)
    bands = dm.band_hashes(sigs, 8, 4)
    pairs = dm.unique_pairs([dm.bucket_pairs(bands[j]) for j in range(8)], len(texts))

    class Sigs:
        def get(self, rows):
            return sigs[np.asarray(rows, np.int64)]

    _, ok, _ = dm.verify(pairs, Sigs(), 0.7, 32)
    root, removed, _ = dm.clusters(len(texts), pairs, ok)
    assert len(removed) > 5                      # the planted copies were found
    assert root.tolist() == want


def _removed_at(pairs: np.ndarray, threshold: float, num_perm: int = 128) -> int:
    """Documents a plain union-find removes from the candidates at `threshold`: one per
    merge of two clusters (each cluster keeps one)."""
    parent: dict[int, int] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    merges = 0
    for a, b, m in pairs.tolist():
        if m / num_perm >= threshold and find(a) != find(b):
            parent[max(find(a), find(b))] = min(find(a), find(b))
            merges += 1
    return merges


def test_threshold_decides_what_is_removed(sample_run, sample_layout, tmp_path):
    # a rerun equal to a fresh run cannot show the threshold is used: each threshold's
    # removals are checked against the candidates' own match counts
    out, _ = sample_run
    pairs = np.load(out / "candidates" / "pairs.npy")
    want = {t: _removed_at(pairs, t) for t in (0.7, 0.8, 0.9)}
    assert want[0.7] > want[0.8] > want[0.9] > 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["removed"]["near_duplicate"] == want[0.8]
    for t in (0.7, 0.9):
        copy = tmp_path / f"t{t}"
        shutil.copytree(out, copy)   # its kept candidates: the rerun measures nothing
        run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", copy,
                   "--threshold", str(t), "--workers", "1")
        got = json.loads((copy / "manifest.json").read_text())["counts"]["removed"]
        assert got["near_duplicate"] == want[t], (t, got, want)

"""algorithms/components.py: large-star / small-star in partitions gives the driver's
union-find, root for root, on random graphs, long chains and planted clusters."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms import components as cc
from algorithms.minhash import union_find


def chain(ids: np.ndarray) -> np.ndarray:
    """A~B~C...: each document joined to the next only, so its ends are far apart."""
    return np.column_stack([ids[:-1], ids[1:]])


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_a_long_chain_in_any_order_is_one_cluster_kept_at_its_smallest_index(parts):
    rng = np.random.default_rng(parts)
    ids = rng.permutation(np.arange(3, 503))          # 500 documents, shuffled along the chain
    root, rounds = cc.components_in_rounds(510, chain(ids), parts)
    assert np.array_equal(root, union_find(510, chain(ids)))
    assert set(root[3:503].tolist()) == {3} and root[:3].tolist() == [0, 1, 2]
    assert 2 <= rounds <= 40, rounds   # about log2(500) on a chain, never one per link


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_give_union_finds_roots(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    m = int(rng.integers(0, 2 * n))
    edges = rng.integers(0, n, size=(m, 2))
    for parts in (1, 3, 16):
        root, _ = cc.components_in_rounds(n, edges, parts)
        assert np.array_equal(root, union_find(n, edges)), (seed, parts)


def test_power_law_clusters_stars_and_duplicated_edges():
    rng = np.random.default_rng(0)
    n, edges, at = 20_000, [], 0
    for size in np.minimum(rng.zipf(1.8, 800), 2_000):   # power-law cluster sizes
        members = rng.permutation(np.arange(at, at + size))
        if size > 1:   # a chain plus random chords, some edges twice
            e = chain(members)
            chords = rng.choice(members, size=(size // 3, 2))
            edges += [e, chords, e[: size // 4, ::-1]]
        at += size
        if at >= n - 2_000:
            break
    edges = np.concatenate(edges)
    root, rounds = cc.components_in_rounds(n, edges, 8)
    assert np.array_equal(root, union_find(n, edges))


def test_a_partition_knows_when_it_is_a_star():
    assert cc.is_star_partition(cc.both_ways(np.array([[0, 5], [0, 7]])))
    assert not cc.is_star_partition(cc.both_ways(np.array([[0, 5], [5, 7]])))   # a path
    assert cc.is_star_partition(np.zeros((0, 2), np.int64))


def test_every_step_keeps_each_edge_in_its_first_nodes_partition():
    rng = np.random.default_rng(1)
    edges = cc.both_ways(rng.integers(0, 400, size=(600, 2)))
    for step in (cc.large_star, cc.small_star):
        for q, shard in enumerate(cc.split(step(edges), 5)):
            assert np.all(cc.partition_of(shard[:, 0], 5) == q)


# --------------------------------------------------------------------------------------
# dedup_minhash.py --cluster tasks: the same bytes as the union-find in the driver.
# --------------------------------------------------------------------------------------

import json   # noqa: E402
import random   # noqa: E402

import pyarrow.parquet as pq   # noqa: E402

from conftest import run_script   # noqa: E402


def _data_files(out) -> dict[str, bytes]:
    """Every file of the output but the manifest and the run's resources (times)."""
    return {str(f.relative_to(out)): f.read_bytes() for f in sorted(out.rglob("*"))
            if f.is_file() and f.name != "manifest.json" and "resources" not in f.name}


def _both_modes(raw, tmp_path, *flags) -> tuple[dict, dict]:
    outs = {}
    for mode in ("driver", "tasks"):
        out = tmp_path / f"dedup_{mode}"
        run_script("dedup_minhash.py", "--input", raw, "--output", out, "--cluster", mode,
                   "--workers", "2", *flags)
        assert json.loads((out / "manifest.json").read_text())["cluster"] == mode
        outs[mode] = out
    return outs["driver"], outs["tasks"]


def test_tasks_give_the_drivers_bytes_on_the_sample(sample_layout, tmp_path):
    driver, tasks = _both_modes(sample_layout / "raw", tmp_path, "--task-mb", "0.01")
    assert _data_files(driver) == _data_files(tasks)
    m = json.loads((tasks / "manifest.json").read_text())
    assert m["counts"]["removed"]["near_duplicate"] > 0
    phases = m["resources"]["phases"]
    assert any(p.startswith("components-") for p in phases)
    # buckets by band and range of hash values, candidates by range of documents
    assert phases["buckets"]["tasks"] > 16 and phases["verify"]["tasks"] > 1, phases
    assert "cluster" not in phases
    assert phases["band-order"]["tasks"] == phases["signatures"]["tasks"]


def test_tasks_without_kept_signatures_give_the_drivers_bytes(sample_layout, tmp_path):
    driver, tasks = _both_modes(sample_layout / "raw", tmp_path, "--task-mb", "0.05",
                                "--no-keep-signatures")
    assert _data_files(driver) == _data_files(tasks)
    assert not (tasks / "candidates").exists() and not (tasks / "signatures").exists()


def test_a_threshold_rerun_in_tasks_reads_the_kept_candidates_only(sample_layout, tmp_path):
    """--threshold 0.9 after a run: in tasks, no bucket, no verification, the kept
    candidates read a slice a task; the same bytes as the driver's rerun."""
    driver, tasks = _both_modes(sample_layout / "raw", tmp_path, "--task-mb", "0.01")
    before = json.loads((tasks / "manifest.json").read_text())["counts"]
    for mode, out in (("driver", driver), ("tasks", tasks)):
        cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output", out,
                        "--cluster", mode, "--workers", "2", "--task-mb", "0.01",
                        "--threshold", "0.9")
        assert "buckets and verification skipped" in cp.stderr
    assert _data_files(driver) == _data_files(tasks)
    phases = json.loads((tasks / "manifest.json").read_text())["resources"]["phases"]
    assert not {"buckets", "pairs", "verify"} & set(phases) and phases["candidates"]["tasks"] > 1
    stats = json.loads((tasks / "report" / "dedup_minhash_stats.json").read_text())
    assert stats["config"]["threshold"] == 0.9
    assert stats["candidates"] == before["candidates"]
    assert stats["candidates_rejected"] > before["candidates_rejected"]


def planted_chain(tmp_path, n: int = 60) -> tuple[list[dict], list[str]]:
    """A raw folder of n documents in a chain, each a few words away from the next (the
    ends far apart), and 40 unrelated ones, shuffled: (records in corpus order, the
    chain's texts in chain order)."""
    rng = random.Random(5)
    words = [f"w{rng.randrange(10**6)}" for _ in range(400)]
    chain_docs = []
    for i in range(n):
        words[rng.randrange(len(words))] = f"x{i}a"
        words[rng.randrange(len(words))] = f"x{i}b"
        chain_docs.append(" ".join(words))
    others = [" ".join(f"o{rng.randrange(10**6)}" for _ in range(200)) for _ in range(40)]
    recs = [{"id": f"c{i:03d}", "text": t} for i, t in enumerate(chain_docs)]
    recs += [{"id": f"o{i:02d}", "text": t} for i, t in enumerate(others)]
    rng.shuffle(recs)
    src = tmp_path / "src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    run_script("download_data.py", "--input", src, "--output", tmp_path / "raw",
               "--shard-rows", "17")
    return recs, chain_docs


def test_a_planted_chain_of_60_documents_is_one_cluster_in_either_mode(tmp_path):
    """Each document a few words away from the next, the ends far apart: one cluster,
    kept at its first document, over several rounds and partitions."""
    recs, chain_docs = planted_chain(tmp_path)
    driver, tasks = _both_modes(tmp_path / "raw", tmp_path, "--task-mb", "0.001")
    assert _data_files(driver) == _data_files(tasks)
    removed = pq.read_table(tasks / "report" / "removed.parquet").to_pylist()
    first = next(r["id"] for r in recs if r["id"].startswith("c"))
    assert {r["id"] for r in removed} == {f"c{i:03d}" for i in range(60)} - {first}
    assert {r["kept_id"] for r in removed} == {first}
    # the ends are far apart: the chain is joined by its links, not by one pair
    assert minhash_similarity(chain_docs[0], chain_docs[-1]) < 0.8
    m = json.loads((tasks / "manifest.json").read_text())
    rounds = [p for p in m["resources"]["phases"] if p.startswith("components-r")]
    assert len(rounds) >= 3, rounds


def minhash_similarity(a: str, b: str) -> float:
    from algorithms.minhash import jaccard, shingles
    return jaccard(shingles(a), shingles(b))


def test_the_reference_engine_refuses_cluster_tasks_in_one_line(sample_layout, tmp_path):
    cp = run_script("dedup_minhash.py", "--input", sample_layout / "raw", "--output",
                    tmp_path / "out", "--engine", "reference", "--cluster", "tasks", check=False)
    assert cp.returncode == 2
    assert cp.stderr.strip().count("\n") == 0 and "--cluster tasks" in cp.stderr
    assert not (tmp_path / "out").exists()


def test_a_run_killed_in_a_round_resumes_to_the_same_bytes(tmp_path):
    """SIGKILL once the third round's edges appear; the rerun resumes the staging folder,
    keeps the rounds already done and gives the uninterrupted run's bytes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    planted_chain(tmp_path, 200)
    flags = ["--input", str(tmp_path / "raw"), "--cluster", "tasks", "--task-mb", "0.01",
             "--workers", "1"]
    run_script("dedup_minhash.py", *flags, "--output", tmp_path / "whole")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(ROOT / "dedup_minhash.py"), *flags,
                             "--output", str(out)], cwd=ROOT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".*.partial/_work/components/r3")) and proc.poll() is None:
        assert time.time() < deadline, "no third round in 120 s"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "the run ended before the kill"
    # the rounds done left their completion markers: the rerun skips those tasks
    for phase in ("components-r0large", "components-r1", "components-r2large"):
        assert list(tmp_path.glob(f".*.partial/_logs/{phase}/completions/*")), phase
    cp = run_script("dedup_minhash.py", *flags, "--output", out)
    assert "resuming in" in cp.stderr
    assert _data_files(out) == _data_files(tmp_path / "whole")


def test_star_edges_give_every_cluster_whole_in_its_centres_partition():
    rng = np.random.default_rng(3)
    edges = rng.integers(0, 300, size=(250, 2))
    root = union_find(300, edges)
    shards = cc.split(cc.both_ways(edges), 4)
    while not all(cc.is_star_partition(s) for s in shards):
        for step in (cc.large_star, cc.small_star):
            out = [cc.split(step(s), 4) for s in shards]
            shards = [np.concatenate([o[q] for o in out]) for q in range(4)]
    seen = {}
    for q, s in enumerate(shards):
        centre, leaf = cc.star_edges(s)
        assert np.all(cc.partition_of(centre, 4) == q)
        for c, l in zip(centre.tolist(), leaf.tolist()):
            seen.setdefault(c, []).append(l)
    removed = np.flatnonzero(root != np.arange(300))
    assert sorted(x for v in seen.values() for x in v) == removed.tolist()
    assert all(root[v].tolist() == [c] * len(v) and v == sorted(v) for c, v in seen.items())


# --------------------------------------------------------------------------------------
# bench/bench_dedup_scale.py: the synthetic corpus and the run it measures.
# --------------------------------------------------------------------------------------

def test_the_dedup_scale_bench_runs_and_its_anchors_remove_the_same(tmp_path):
    """A smoke run of `make bench-dedup-scale` on 20,000 and 60,000 documents: every phase
    measured with its bytes, the union-find and datatrove's MinhashDedupCluster remove the
    documents the tasks removed, and the projection is written (the figures themselves
    belong to the benchmark)."""
    cp = run_script("bench/bench_dedup_scale.py", "--docs", "2e4,6e4", "--work", tmp_path / "w",
                    "--out", tmp_path / "res", "--workers", "2", "--task-mb", "0.1",
                    timeout=900)
    res = json.loads((tmp_path / "res.json").read_text())
    for row in res["rows"]:
        assert row["removed"] > 0 and row["rounds"] >= 2
        a = row["anchors"]
        assert a["union_find"]["removed"] == a["datatrove_cluster"]["removed"] == row["removed"]
        assert row["phases"]["verify"]["bytes_read"] > 0 and row["phases"]["buckets"]["tasks"] > 4
    assert len(res["projection"]) == 6 and "Projection" in cp.stdout
    assert not (tmp_path / "w" / "n20000").exists()   # each size's files removed after it


def test_the_planted_corpus_has_power_law_clusters_and_long_chains():
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_dedup_scale import texts_of

    n = 400_000
    g = np.arange(n, dtype=np.uint64)
    codes, role = texts_of(g, n, 0.2, 0.1)
    assert abs((role == 0).mean() - 0.7) < 0.01 and abs((role == 2).mean() - 0.1) < 0.01
    _, sizes = np.unique(codes[role == 1], axis=0, return_counts=True)   # unchanged copies
    assert sizes.max() > 20 * np.median(sizes)            # a heavy tail, not equal sizes
    # a chain member's text, moved on by one offset (2 letters), starts another member's
    # text: most members have a neighbour, so a chain is long and its ends far apart
    chain = codes[role == 2]
    starts = {bytes(r[:-2]) for r in chain}
    linked = np.mean([bytes(r[2:]) in starts for r in chain])
    assert linked > 0.75, linked   # 1 - exp(-members per offset): 1.6 here
    assert len({bytes(r) for r in chain}) > 0.4 * len(chain)   # not one text repeated

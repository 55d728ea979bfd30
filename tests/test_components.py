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

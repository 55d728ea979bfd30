"""Connected components in rounds of bounded work: large-star / small-star over edge
partitions (tutorial section 3.6's union-find, for a corpus no single process can hold).

The driver's union-find (algorithms/minhash.py: union_find) holds 8 bytes per document
and every verified pair. Here no step holds more than one partition of the edges: the
edges are split by their first node (`partition_of`), and a step reads one partition,
groups its edges by node, and writes each new edge to the partition of its first node.
Each step is therefore a phase of tasks on any executor, one task per partition, and a
round is two phases. Kiveris et al., "Connected Components in MapReduce and Beyond"
(SoCC 2014):

- large-star: every node u joins its larger neighbours to m(u), the smallest of u and
  its neighbours;
- small-star: every node u joins its smaller neighbours, and itself, to the smallest of
  them.

Neither changes the components, and both only ever point a node at a smaller one, so the
fixed point is every component a star around its smallest node: each document's root is
its cluster's smallest index, the rule minhash.clusters keeps, so the answer is
byte-for-byte the driver's. A partition can tell on its own whether it is done
(`is_star_partition`): a node is a leaf (one neighbour, smaller than it) or a centre (every
neighbour larger). When every partition says so, every component is a star (a leaf's
neighbour has a neighbour larger than itself, so it is no leaf: it is a centre).

Why this and not label propagation with pointer jumping: pointer jumping reads the label
of an arbitrary node, a random read into a table of N labels, which a task cannot hold
and a shared filesystem serves badly; large-star / small-star only ever reads the edges
of its own partition, sorted, and writes each new edge once. Rounds: O(log^2 n) proved,
and a chain of n documents takes about log2(n) rounds.

Edges are int64 arrays of shape (m, 2), each undirected edge stored in both directions
(`both_ways`), self-loops dropped, duplicates removed within a partition.
"""

from __future__ import annotations

import numpy as np


def both_ways(edges: np.ndarray) -> np.ndarray:
    """(u, v) and (v, u) of every edge, without self-loops."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([e, e[:, ::-1]])


def partition_of(nodes: np.ndarray, parts: int) -> np.ndarray:
    """The partition that holds the edges leaving each node: a multiplicative hash, so
    that a cluster of neighbouring indices spreads over the partitions."""
    h = np.asarray(nodes, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return ((h >> np.uint64(32)) % np.uint64(parts)).astype(np.int64)


def _grouped(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct directed edges sorted by (u, v), and for each edge the start of its
    node's group, with each group's node and smallest neighbour."""
    if len(edges) == 0:
        z = np.zeros(0, np.int64)
        return edges.reshape(0, 2), z, z, z
    e = edges[np.lexsort((edges[:, 1], edges[:, 0]))]     # sorted by u, then v
    e = e[np.r_[True, (e[1:] != e[:-1]).any(axis=1)]]     # each edge once
    starts = np.flatnonzero(np.r_[True, e[1:, 0] != e[:-1, 0]])
    nodes = e[starts, 0]
    smallest = e[starts, 1]                       # sorted: the first neighbour is the smallest
    return e, starts, nodes, smallest


def is_star_partition(edges: np.ndarray) -> bool:
    """Whether every node of this partition is a leaf (exactly one neighbour, smaller) or a
    centre (every neighbour larger)."""
    e, starts, nodes, smallest = _grouped(edges)
    if len(e) == 0:
        return True
    degree = np.diff(np.r_[starts, len(e)])
    leaf = (smallest < nodes) & (degree == 1)
    centre = smallest > nodes
    return bool(np.all(leaf | centre))


def large_star(edges: np.ndarray) -> np.ndarray:
    """One partition's large-star: for each node u, every neighbour v > u is joined to
    m(u) = min(u, neighbours of u). The new edges, both ways."""
    e, starts, nodes, smallest = _grouped(edges)
    if len(e) == 0:
        return e
    m = np.minimum(nodes, smallest)
    m_of = np.repeat(m, np.diff(np.r_[starts, len(e)]))
    larger = e[:, 1] > e[:, 0]
    return both_ways(np.column_stack([e[larger, 1], m_of[larger]]))


def small_star(edges: np.ndarray) -> np.ndarray:
    """One partition's small-star: for each node u, its neighbours v < u and u itself are
    joined to the smallest of them. The new edges, both ways; an edge to a larger
    neighbour is left to that neighbour (it holds the same edge, the other way)."""
    e, starts, nodes, _ = _grouped(edges)
    if len(e) == 0:
        return e
    smaller = e[:, 1] < e[:, 0]
    s = e[smaller]
    if len(s) == 0:
        return s.reshape(0, 2)
    # per node with smaller neighbours: the smallest of them (sorted: the group's first)
    first = np.r_[True, s[1:, 0] != s[:-1, 0]]
    m_of = np.maximum.accumulate(np.where(first, np.arange(len(s)), 0))
    m = s[m_of, 1]
    return both_ways(np.concatenate([np.column_stack([s[:, 1], m]),
                                     np.column_stack([s[first, 0], m[first]])]))


def by_partition(edges: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """The edges ordered by the partition of their first node (stable), and where each
    partition's slice begins and ends: what a task writes, read a slice a partition."""
    p = partition_of(edges[:, 0], parts)
    order = np.argsort(p, kind="stable")
    return edges[order], np.searchsorted(p[order], np.arange(parts + 1))


def split(edges: np.ndarray, parts: int) -> list[np.ndarray]:
    """Edges by the partition of their first node, one array a partition."""
    ordered, bounds = by_partition(edges, parts)
    return [ordered[bounds[i]:bounds[i + 1]] for i in range(parts)]


def roots(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Once every partition is a star: (leaf, its centre) of this partition's leaves,
    sorted by leaf. The centre is the cluster's smallest index."""
    e, starts, nodes, smallest = _grouped(edges)
    leaf = smallest < nodes
    return nodes[leaf], smallest[leaf]


def star_edges(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Once every partition is a star: (centre, leaf) of this partition's centres, sorted
    by centre then leaf. An edge to a larger node leaves a centre (a leaf's one neighbour
    is smaller), and a centre's partition holds all its edges: whole clusters."""
    e = _grouped(edges)[0]
    out = e[e[:, 0] < e[:, 1]]
    return out[:, 0], out[:, 1]


def components_in_rounds(n: int, edges: np.ndarray, parts: int) -> tuple[np.ndarray, int]:
    """Every document's root (its component's smallest index), computed as the tasks
    compute it, partition by partition, here one after another in this process; and the
    number of rounds. The oracle is minhash.union_find."""
    shards = split(both_ways(edges), parts)
    rounds = 0
    while not all(is_star_partition(s) for s in shards):
        for step in (large_star, small_star):
            out = [split(step(s), parts) for s in shards]
            shards = [np.concatenate([o[q] for o in out]) for q in range(parts)]
        rounds += 1
    root = np.arange(n, dtype=np.int64)
    for s in shards:
        leaf, centre = roots(s)
        root[leaf] = centre
    return root, rounds

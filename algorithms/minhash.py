"""Near-duplicate detection with MinHash, LSH and union-find (tutorial sections 3.4-3.6).

Read the first part beside the tutorial: it is the algorithm in plain Python, computing
exactly the numbers the stage computes (the tests check that the compiled path, below
and in algorithms/minhash_fast.py, gives the same signatures, candidates and clusters).

3.4  A document becomes the set of its n-character shingles (on its normalised text, as
     in exact dedup), each shingle hashed to 32 bits; k hash functions each keep their
     smallest value over the set: the signature. Two signatures agree in one position
     with probability equal to the Jaccard similarity of the two sets.
3.5  The signature is cut into b bands of r rows; two documents whose band j is equal
     land in the same bucket and become a candidate pair, with probability
     1 - (1 - s^r)^b. Only candidates are compared, over all k positions.
3.6  Verified pairs are joined into clusters (union-find); each cluster keeps its first
     document in corpus order, so the result does not depend on the order of the work.

Departures from section 3.6's code, which uses datatrove's MinhashDedupSignature: this
project computes its own signatures (character shingles as in 3.4, not datatrove's word
5-grams, which need spaCy; 10-70 times faster on one core), and checks every candidate
against its full signature before merging, which datatrove does not. datatrove still
runs every parallel phase (its executors, pipeline.executors).
"""

from __future__ import annotations

import numpy as np

from . import minhash_fast as fast
from .exact_dedup import normalise
from .minhash_fast import EMPTY, LONG_TEXT, _char_map, _code_points, _raw_pieces, normalised_pieces

MASK64 = (1 << 64) - 1
ALL_PAIRS_MAX = 64           # buckets up to this size: every pair is a candidate
SIGNATURE_VERSION = 1        # bump when the hash family or the normalisation changes


# --------------------------------------------------------------------------------------
# The readable version.
# --------------------------------------------------------------------------------------

def shingles(text: str, n: int = 5) -> set[str]:
    """3.4: the set of n-character pieces of a text. A text shorter than n is one shingle."""
    if len(text) < n:
        return {text}
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """|A ∩ B| / |A ∪ B| (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if a or b else 1.0


def fmix64(h: int) -> int:
    """MurmurHash3's finaliser: spreads every bit of h over all 64 bits."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


def shingle_hash(s: str) -> int:
    """A shingle's 32-bit hash: FNV-1a over its code points and its length, then fmix64."""
    h = 0xCBF29CE484222325
    for c in s:
        h = ((h ^ ord(c)) * 0x100000001B3) & MASK64
    return fmix64(h ^ len(s)) >> 32


def signature(text: str, a, b, n: int = 5) -> list[int]:
    """3.4: for each hash function h_i(x) = ((a_i * x + b_i) mod 2^64) >> 32, the smallest
    value over the text's shingle hashes: k = len(a) values, whatever the text's length.
    The k functions run at once, as numpy arrays (uint64 arithmetic wraps mod 2^64)."""
    hashes = np.array(sorted({shingle_hash(s) for s in shingles(normalise(text), n)}),
                      dtype=np.uint64)
    a = np.asarray(a, dtype=np.uint64)[:, None]
    b = np.asarray(b, dtype=np.uint64)[:, None]
    return (((a * hashes[None, :] + b) >> np.uint64(32)).min(axis=1)).tolist()


def band_hash(sig: list[int], j: int, r: int) -> int:
    """3.5: a 64-bit hash of band j (values j*r .. j*r+r-1) of a signature."""
    h = (0x9E3779B97F4A7C15 * (j + 1)) & MASK64
    for v in sig[j * r:(j + 1) * r]:
        h = fmix64(h ^ v)
    return h


def candidate_pairs(sigs: list[list[int]], b: int, r: int,
                    per_band: list[int] | None = None) -> set[tuple[int, int]]:
    """3.5: documents that share a bucket in any band become candidate pairs (x < y).

    A bucket of more than ALL_PAIRS_MAX documents (a templated page, say) yields each of
    its documents paired with the bucket's first and with the one before it, not all
    n^2/2 pairs: its copies still join one cluster. per_band: if given, each band's
    number of pairs is appended to it (a pair found in two bands counts twice)."""
    pairs = set()
    for j in range(b):
        buckets: dict[int, list[int]] = {}
        for d, sig in enumerate(sigs):
            buckets.setdefault(band_hash(sig, j, r), []).append(d)
        found = 0
        for docs in buckets.values():
            if len(docs) <= ALL_PAIRS_MAX:
                band = [(x, y) for i, x in enumerate(docs) for y in docs[i + 1:]]
            else:
                band = [(docs[0], y) for y in docs[1:]] + \
                       [(x, y) for x, y in zip(docs[1:], docs[2:])]
            found += len(band)
            pairs |= set(band)
        if per_band is not None:
            per_band.append(found)
    return pairs


def agreement(sig_x: list[int], sig_y: list[int]) -> int:
    """3.5's comparison of a candidate: at how many of the k positions its two signatures
    agree (the estimate of their Jaccard similarity is that over k)."""
    return sum(p == q for p, q in zip(sig_x, sig_y))


def find(parent: list[int], x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]   # path halving
        x = parent[x]
    return x


def components(n_docs: int, pairs) -> list[int]:
    """3.6: union-find over the duplicate pairs; each document's root is the smallest
    index of its cluster, so each cluster keeps its first document in corpus order."""
    parent = list(range(n_docs))
    for x, y in pairs:
        rx, ry = find(parent, x), find(parent, y)
        parent[max(rx, ry)] = min(rx, ry)
    return [find(parent, d) for d in range(n_docs)]


def near_duplicates(texts: list[str], a, b, bands: int, rows: int,
                    threshold: float, n: int = 5) -> list[int]:
    """3.4-3.6 end to end: for each document, the document its cluster keeps (itself when
    it is kept). A candidate is a duplicate when its signatures agree on at least
    `threshold` of the k positions."""
    sigs = [signature(t, a, b, n) for t in texts]
    dups = [(x, y) for x, y in sorted(candidate_pairs(sigs, bands, rows))
            if agreement(sigs[x], sigs[y]) / len(a) >= threshold - 1e-12]
    return components(len(texts), dups)


# --------------------------------------------------------------------------------------
# The same at scale: signatures of whole batches in compiled code, buckets by sorting,
# union-find in numpy.
# --------------------------------------------------------------------------------------

class MinHasher:
    """MinHash signatures of k hash functions over n-character shingles (section 3.4).

    The only MinHash implementation in the project: dedup_minhash.py, minhash_demo.py and
    the benchmark all use it. The parameters (a_i odd, b_i) come from `seed`, and the
    first k of them do not depend on num_perm, so MinHasher(16) is a prefix of
    MinHasher(256) with the same seed.
    """

    def __init__(self, num_perm: int = 128, ngram: int = 5, seed: int = 1):
        if num_perm < 1 or ngram < 1:
            raise ValueError("num_perm and ngram must be positive")
        self.k, self.n, self.seed = num_perm, ngram, seed
        ab = np.random.default_rng(seed).integers(0, 2**64, size=(num_perm, 2), dtype=np.uint64,
                                                  endpoint=False)
        self.a = ab[:, 0] | np.uint64(1)   # odd multipliers
        self.b = ab[:, 1].copy()

    def empty(self, docs: int) -> np.ndarray:
        return np.full((docs, self.k), EMPTY, dtype=np.uint32)

    def signatures(self, texts: list[str | None], normalised: bool = False) -> np.ndarray:
        """(len(texts), k) uint32 signatures; texts are normalised first unless told not."""
        return self.signatures_and_lengths(texts, normalised)[0]

    def signatures_and_lengths(self, texts: list[str | None],
                               normalised: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Signatures and the length (characters) of each normalised text."""
        out = self.empty(len(texts))
        lens = np.zeros(len(texts), dtype=np.int64)
        short: list[int] = []
        for i, t in enumerate(texts):
            if t is not None and len(t) > LONG_TEXT:
                lens[i] = self._long(t, out[i:i + 1], normalised)
            else:
                short.append(i)
        if short and len(short) == len(texts):
            self._short([t or "" for t in texts], out, lens, normalised)
        elif short:
            sub, sub_lens = self.empty(len(short)), np.zeros(len(short), dtype=np.int64)
            self._short([texts[i] or "" for i in short], sub, sub_lens, normalised)
            out[short], lens[short] = sub, sub_lens
        return out, lens

    def signatures_of_column(self, col) -> tuple[np.ndarray, np.ndarray]:
        """signatures_and_lengths(col.to_pylist()) for an Arrow string column (a null is
        an empty text), read from the column's own UTF-8 buffer: no Python string and no
        array of code points is made, except for the rare text the kernel leaves to
        signatures_and_lengths (longer than LONG_TEXT bytes, or holding a character whose
        lowercase needs str.lower())."""
        from .arrays import fill_empty, from_numpy, text_buffers

        col = fill_empty(col)
        data, offsets = text_buffers(col)
        out = self.empty(len(offsets) - 1)
        lens = np.zeros(len(out), dtype=np.int64)
        fast._sig_utf8_texts(data, offsets, self.n, self.a, self.b, _char_map(), LONG_TEXT,
                             out, lens)
        left = np.flatnonzero(lens < 0)
        if len(left):
            out[left], lens[left] = self.signatures_and_lengths(
                col.take(from_numpy(left)).to_pylist())
        return out, lens

    def signature(self, text: str, normalised: bool = False) -> np.ndarray:
        return self.signatures([text], normalised)[0]

    def _short(self, texts: list[str], out: np.ndarray, lens: np.ndarray,
               normalised: bool) -> None:
        """Texts up to LONG_TEXT characters, all in one kernel call: normalised there,
        except the rare text with a character whose lowercase needs str.lower()."""
        cp, off = _code_points(texts)
        if normalised:
            fast._sig_texts(cp, off, self.n, self.a, self.b, out)
            lens[:] = np.diff(off)
            return
        fast._sig_raw_texts(cp, off, self.n, self.a, self.b, _char_map(), out, lens)
        left = np.nonzero(lens < 0)[0]
        if len(left):
            cp, off = _code_points([normalise(texts[i]) for i in left])
            sub = self.empty(len(left))
            fast._sig_texts(cp, off, self.n, self.a, self.b, sub)
            out[left], lens[left] = sub, np.diff(off)

    def _long(self, text: str, out: np.ndarray, normalised: bool) -> int:
        """A long text, piece by piece: the last n-1 characters of each piece are carried
        over, so every shingle that spans two pieces is still hashed. Returns the length
        of the normalised text."""
        carry, ran, length = "", False, 0
        pieces = _raw_pieces(text) if normalised else normalised_pieces(text)
        for piece in pieces:
            length += len(piece)
            buf = carry + piece
            if len(buf) >= self.n:
                cp, off = _code_points([buf])
                fast._sig_texts(cp, off, self.n, self.a, self.b, out)
                ran = True
                carry = buf[len(buf) - (self.n - 1):] if self.n > 1 else ""
            else:
                carry = buf
        if not ran:  # the whole normalised text is shorter than one shingle
            cp, off = _code_points([carry])
            fast._sig_texts(cp, off, self.n, self.a, self.b, out)
        return length

    def signatures_of_hashed_sets(self, sets: list[np.ndarray]) -> np.ndarray:
        """Signatures of sets of 32-bit shingle hashes (the simulation in minhash_demo.py)."""
        lens = np.array([len(s) for s in sets], dtype=np.int64)
        off = np.zeros(len(sets) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        x = np.concatenate(sets).astype(np.uint32) if sets else np.zeros(0, np.uint32)
        out = self.empty(len(sets))
        fast._sig_hashed(x, off, self.a, self.b, out)
        return out


def similarity(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """MinHash estimate of Jaccard: the fraction of positions where two signatures agree."""
    return (np.asarray(sig_a) == np.asarray(sig_b)).mean(axis=-1)


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(bands, docs) uint64: one hash per band of each signature (section 3.5)."""
    if sig.shape[1] != bands * rows:
        raise ValueError(f"signature length {sig.shape[1]} != bands {bands} x rows {rows}")
    out = np.empty((bands, sig.shape[0]), dtype=np.uint64)
    fast._band_hashes(np.ascontiguousarray(sig), bands, rows, out)
    return out


def candidate_probability(s, bands: int, rows: int):
    """P = 1 - (1 - s^r)^b: the chance that a pair of similarity s shares a band."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands


def bucket_pairs(h: np.ndarray, all_pairs_max: int = ALL_PAIRS_MAX) -> np.ndarray:
    """Candidate pairs (i < j) of documents whose band hashes h are equal.

    Buckets are found by a stable sort, not a dict: equal hashes become neighbours and
    ties stay in corpus order. A bucket of m <= all_pairs_max documents yields all its
    pairs, so verification sees every edge; a bigger bucket (templated pages, say)
    yields each member paired with the bucket's first member and with its predecessor,
    to stay linear.
    """
    order = np.argsort(h, kind="stable")
    dummy = np.empty((0, 2), dtype=np.int64)
    n = fast._bucket_pairs_into(h, order, all_pairs_max, dummy, False)
    out = np.empty((n, 2), dtype=np.int64)
    fast._bucket_pairs_into(h, order, all_pairs_max, out, True)
    return out


def union_find(n: int, edges: np.ndarray) -> np.ndarray:
    """Connected components of n nodes; each node's root is its component's smallest index.

    In numpy, by hooking and pointer jumping: every root takes the smallest root across
    its edges, then every node follows parents until it reaches a root; repeat until no
    root changes. Roots only decrease and always belong to the component, so the fixed
    point is each component's smallest index. A few rounds for real clusters; no
    compiler to load (a rerun that reuses everything else never imports one)."""
    out = np.arange(n, dtype=np.int64)
    if len(edges) == 0:
        return out
    # only the documents on an edge take part, renumbered in order (so the smallest
    # local index is the smallest document index)
    nodes, local = np.unique(np.asarray(edges, dtype=np.int64), return_inverse=True)
    local = local.reshape(-1, 2)
    a, b = local[:, 0], local[:, 1]
    root = np.arange(len(nodes), dtype=np.int64)
    while True:
        ra, rb = root[a], root[b]
        m = np.minimum(ra, rb)
        new = root.copy()
        np.minimum.at(new, ra, m)
        np.minimum.at(new, rb, m)
        while True:   # pointer jumping: every node straight to its root
            nxt = new[new]
            if np.array_equal(nxt, new):
                break
            new = nxt
        if np.array_equal(new, root):
            out[nodes] = nodes[root]
            return out
        root = new


def unique_pairs(band_pairs: list[np.ndarray], n_docs: int) -> np.ndarray:
    """All candidate pairs from every band, each once, sorted."""
    keys = [p[:, 0] * n_docs + p[:, 1] for p in band_pairs if len(p)]
    if not keys:
        return np.zeros((0, 2), np.int64)
    u = np.unique(np.concatenate(keys))
    return np.stack([u // n_docs, u % n_docs], axis=1)


def match_counts(pairs: np.ndarray, sigs, chunk: int = 1 << 16) -> np.ndarray:
    """For each candidate, at how many of the k positions its two signatures agree
    (sigs.get(rows): the signatures of those documents).
    Pairs are compared `chunk` at a time: at most 2 x chunk x k x 4 bytes of signatures
    (64 MB at k = 128) are held, however many candidates there are."""
    out = np.empty(len(pairs), dtype=np.int64)
    for s in range(0, len(pairs), chunk):
        p = pairs[s:s + chunk]
        out[s:s + chunk] = (sigs.get(p[:, 0]) == sigs.get(p[:, 1])).sum(axis=1)
    return out


def verify(pairs: np.ndarray, sigs, threshold: float, k: int,
           matches: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Similarity of each candidate over all k values (matches / k, exactly what
    similarity() gives); returns (sims, accepted mask, matches). Kept `matches` (a
    rerun's) are used as they are: a new threshold needs no signature at all."""
    if matches is None:
        matches = match_counts(pairs, sigs)
    sims = matches / k
    return sims, accepted(sims, threshold), matches


def accepted(sims: np.ndarray, threshold: float) -> np.ndarray:
    return sims >= threshold - 1e-12


def clusters(n_docs: int, pairs: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                       np.ndarray]:
    """(root of every document, removed documents, the document each was merged into)."""
    root = union_find(n_docs, np.ascontiguousarray(pairs[ok]))
    removed = np.nonzero(root != np.arange(n_docs))[0]
    return root, removed, root[removed]


def largest_clusters(root: np.ndarray, n: int = 5) -> list[tuple[int, int]]:
    """(kept index, size) of the n largest clusters, ties by corpus order."""
    return largest_clusters_of(root[root != np.arange(len(root))], n)


def largest_clusters_of(kept_of: np.ndarray, n: int = 5) -> list[tuple[int, int]]:
    """largest_clusters from the document each removed one was merged into."""
    if len(kept_of) == 0:
        return []
    r, c = np.unique(kept_of, return_counts=True)
    order = np.lexsort((r, -c))[:n]
    return [(int(r[i]), int(c[i]) + 1) for i in order]


def cluster_size_counts(kept_of: np.ndarray) -> dict[str, int]:
    """{cluster size: how many clusters} over clusters of 2 or more documents."""
    if len(kept_of) == 0:
        return {}
    _, c = np.unique(kept_of, return_counts=True)
    sizes, n = np.unique(c + 1, return_counts=True)
    return {str(int(s)): int(k) for s, k in zip(sizes, n)}

"""A seeded hash of a document's id: the key that the tokenizer's sample (4.7) and the
validation split (5.7) draw documents by. It depends only on the id and the seed, never
on where the document sits, so the same documents are drawn whatever the number of
shards, tasks or workers."""

from __future__ import annotations

import numpy as np
import xxhash


def id_hashes(ids: list, seed: int) -> np.ndarray:
    """xxh64(id, seed) of each document id, as uint64."""
    return np.fromiter((xxhash.xxh64_intdigest(str(i).encode("utf-8"), seed) for i in ids),
                       dtype=np.uint64, count=len(ids))

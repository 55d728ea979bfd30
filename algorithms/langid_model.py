"""The fastText model file (.bin / .ftz), read into numpy arrays: FastText::loadModel and
the load() of each part, nothing compiled. algorithms.langid_fast builds its kernels' tables from
what this returns; clean.py's up-front model check uses it alone (milliseconds, and no
numba import)."""

from __future__ import annotations

import mmap
import struct

import numpy as np

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
EOS = b"</s>"
LABEL_PREFIX = b"__label__"
SUPERVISED = 3  # model_name::sup
LOSS_HS, LOSS_NS, LOSS_SOFTMAX, LOSS_OVA = 1, 2, 3, 4  # loss_name
KSUB = 256  # centroids per sub-quantizer (ProductQuantizer::ksub_)


# --------------------------------------------------------------------------------------
# Reading the model file (FastText::loadModel and the load() of each part).
# --------------------------------------------------------------------------------------


class _Reader:
    """Sequential little-endian reads over a memory-mapped file."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype, count: int) -> np.ndarray:
        """A fresh (aligned, writable) copy of `count` items at the current position."""
        dtype = np.dtype(dtype).newbyteorder("<")
        if self.pos + count * dtype.itemsize > len(self.buf):
            raise ValueError("truncated fastText model file")
        a = np.frombuffer(self.buf, dtype, count, self.pos).astype(dtype.newbyteorder("="))
        self.pos += count * dtype.itemsize
        return a

    def cstring(self) -> bytes:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise ValueError("truncated fastText model file")
        s = bytes(self.buf[self.pos:end])
        self.pos = end + 1
        return s


ARGS_FIELDS = ("dim", "ws", "epoch", "minCount", "neg", "wordNgrams", "loss", "model",
               "bucket", "minn", "maxn", "lrUpdateRate")


def _read_args(r: _Reader) -> dict:
    """Args::load: twelve int32 fields, then t (double)."""
    args = dict(zip(ARGS_FIELDS, r.unpack("12i")))
    args["t"] = r.unpack("d")[0]
    return args


def _read_dictionary(r: _Reader) -> dict:
    """Dictionary::load: counts, the entries (word NUL, int64 count, int8 type), then
    pruneidx_size (bucket -> kept-row) pairs; pruneidx_size is -1 when not pruned."""
    size, nwords, nlabels, _ntokens, pruneidx_size = r.unpack("iiiqq")
    words, counts, types = [], np.zeros(size, np.int64), np.zeros(size, np.int8)
    for i in range(size):
        words.append(r.cstring())
        counts[i], types[i] = r.unpack("qb")
    pairs = r.array(np.int32, 2 * max(pruneidx_size, 0)).reshape(-1, 2)
    return {"words": words, "counts": counts, "types": types, "nwords": nwords,
            "nlabels": nlabels, "pruneidx_size": pruneidx_size, "prune_pairs": pairs}


def _read_dense(r: _Reader) -> np.ndarray:
    """DenseMatrix::load: int64 rows, int64 cols, float32 data."""
    m, n = r.unpack("qq")
    return r.array(np.float32, m * n).reshape(m, n)


def _read_pq(r: _Reader) -> dict:
    """ProductQuantizer::load: dim, nsubq, dsub, lastdsub, then dim * 256 centroids."""
    dim, nsubq, dsub, lastdsub = r.unpack("4i")
    return {"dim": dim, "nsubq": nsubq, "dsub": dsub, "lastdsub": lastdsub,
            "centroids": r.array(np.float32, dim * KSUB)}


def _pq_decode(pq: dict, codes: np.ndarray) -> np.ndarray:
    """The centroids the codes select, laid out as ProductQuantizer::get_centroids does
    (the last sub-quantizer may be narrower: lastdsub)."""
    rows = np.empty((codes.shape[0], pq["dim"]), np.float32)
    dsub, c = pq["dsub"], pq["centroids"]
    for m in range(pq["nsubq"]):
        d = pq["lastdsub"] if m == pq["nsubq"] - 1 else dsub
        table = c[m * KSUB * dsub:m * KSUB * dsub + KSUB * d].reshape(KSUB, d)
        rows[:, m * dsub:m * dsub + d] = table[codes[:, m]]
    return rows


def _read_quant(r: _Reader) -> tuple[np.ndarray, np.ndarray]:
    """QuantMatrix::load, decoded: (unscaled centroid rows, float32 norm of each row).
    The norm is 1 without qnorm; with it, the norm quantizer's centroid of the row."""
    qnorm, m, _n, codesize = r.unpack("?qqi")
    codes = r.array(np.uint8, codesize)
    pq = _read_pq(r)
    rows = _pq_decode(pq, codes.reshape(m, pq["nsubq"]))
    norms = np.ones(m, np.float32)
    if qnorm:
        norm_codes = r.array(np.uint8, m)
        npq = _read_pq(r)
        norms = _pq_decode(npq, norm_codes.reshape(m, 1))[:, 0].copy()
    return rows, norms


def _read_model(path: str) -> dict:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        r = _Reader(buf)
        if len(buf) < 8:
            raise ValueError(f"{path}: not a fastText model")
        magic, version = r.unpack("ii")
        if magic != FASTTEXT_MAGIC or version > FASTTEXT_VERSION:
            raise ValueError(f"{path}: not a fastText model (or a newer format)")
        args = _read_args(r)
        if version == 11 and args["model"] == SUPERVISED:
            args["maxn"] = 0  # FastText::loadModel: old supervised models had no char n-grams
        dictionary = _read_dictionary(r)
        (quant_input,) = r.unpack("?")
        if quant_input:
            # QuantMatrix::addRowToVector adds `norm * centroid`, each product rounded to
            # float32 before the add: precompute exactly those products.
            centroids, norms = _read_quant(r)
            input_rows = centroids * norms[:, None]
        else:
            input_rows = _read_dense(r)
        (qout,) = r.unpack("?")
        if quant_input and qout:
            # QuantMatrix::dotRow = ProductQuantizer::mulcode: the dot product with the
            # unscaled centroids, then times the norm.
            output_rows, output_norms = _read_quant(r)
        else:
            output_rows = _read_dense(r)
            output_norms = np.ones(len(output_rows), np.float32)  # d * 1.0f == d exactly
    return {"args": args, "dictionary": dictionary, "input_rows": input_rows,
            "output_rows": output_rows, "output_norms": output_norms}


def read_model(path) -> dict:
    """The model file parsed and checked: ValueError if it is not a supervised model with
    a supported loss (hierarchical softmax or softmax)."""
    model = _read_model(str(path))
    args = model["args"]
    if args["model"] != SUPERVISED:
        raise ValueError(f"{path}: not a supervised fastText model")
    if args["loss"] not in (LOSS_HS, LOSS_SOFTMAX):
        raise ValueError(f"{path}: loss {args['loss']} is not supported "
                         "(hierarchical softmax and softmax are)")
    return model

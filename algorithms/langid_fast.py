"""fastText language ID (lid.176) reimplemented in numba: the same answers, several times faster.

clean.py identifies the language of every document with fastText's lid.176 model, and
`model.predict(text.replace("\\n", " "), k=1)` is the stage's main cost (7-10 MB/s per
core). This module is an exact reimplementation of that one call -- fastText 0.9.2's
supervised prediction, top-1 -- compiled with numba over the UTF-8 bytes of the text:

    from algorithms.langid_fast import FastLid
    lid = FastLid.load(path)                 # .ftz or .bin; cached per process
    lang, prob = lid.predict(text)           # == fastText on text.replace("\\n", " ")
    langs, probs = lid.predict_many(texts)   # list of str, or a pyarrow string array

It returns the same label and the same probability, bit for bit (the float32 fastText
computes, as a Python float), for every text. What is reproduced, from the C++ sources
(src/fasttext.cc, dictionary.cc, loss.cc, quantmatrix.cc, productquantizer.cc,
densematrix.cc, vector.cc) and checked against the compiled wheel's machine code:

* the model file (read by algorithms.langid_model): Args, Dictionary (words, labels, the
  pruned-bucket index of a quantized model), the input matrix (dense, or
  product-quantized with quantized norms) and the output matrix (dense, or quantized
  when qout);
* tokenising (Dictionary::readWord / getLine): words are split on the bytes
  ' ' \\n \\r \\t \\v \\f \\0 (a newline is an ordinary separator here, as after
  clean's replace), the end of the text is the token "</s>", and a literal "</s>" in
  the text ends the line early, as it does in fastText;
* each word's input rows: a dictionary word contributes its precomputed subword list
  (its own id first); any other word the hashed character n-grams of "<word>"
  (minn..maxn UTF-8 characters; FNV-1a over the bytes *sign-extended* from int8, as
  fastText does; modulo bucket; then the pruned-bucket index, n-grams not kept being
  dropped); tokens starting with "__label__" contribute nothing; word n-grams when
  wordNgrams > 1;
* the hidden vector: a float32 sum of those rows in the same order, times the float32
  value of 1.0/count (Vector::mul). A quantized row is decoded once at load time as
  the float32 products `norm * centroid` that ProductQuantizer::addcode computes before
  each add, so a lookup here is one row add with identical rounding;
* the output: hierarchical softmax (lid.176's loss; Huffman tree from the label counts
  as in HierarchicalSoftmaxLoss::buildTree, depth-first search with the k=1 pruning,
  sigmoid `1 / (1 + expf(-f))`, `std_log(x) = log(double(x) + 1e-5)` rounded to float),
  or plain softmax; ties go to the later label, as with fastText's heap. The
  probability is expf(score), as FastText::predictLine computes it.

Every float32/float64 step follows the C++ (no fastmath, so no fused multiply-add or
reassociation; the wheel itself is plain SSE2 code without FMA), and the exp/log calls
go to the same libm functions (expf, exp, log) fastText calls.

Why it is faster: a dictionary word's rows are a precomputed list; the char n-grams of
an out-of-vocabulary token are computed once and kept in a small cache (tokens repeat:
in English documentation ~3/4 of them are repeats), and when computed, a bit per bucket
skips the ~90% of n-grams the pruned model dropped without touching the 8 MB bucket map.
Measured per core (time.process_time, fastText and FastLid alternating, on a shared
machine): on 1.13 GB of documentation in English, Chinese and other languages, fastText
6.8-7.6 MB/s, FastLid.predict_many 54-55 MB/s (7-8x), FastLid.predict 44-45 MB/s; on
45 MB of English 7.5-8 vs 55-60 MB/s; on the bundled sample (1/3 Chinese) 8 vs 53 MB/s.
On 200-character windows fastText takes ~32 us a call, predict() ~8 us (4x; ~3.5 us of
it is the call itself) and predict_many 7x. An AVX2-only build (NUMBA_CPU_NAME=znver2
with NUMBA_CPU_FEATURES lacking avx512*: the name alone keeps the host's features)
gives the same results at the same speed. The model takes 13 MB of arrays (fastText's
~3 MB).

Identity is tested by tests/test_lid.py against the real fasttext package (label and
exact probability) on every document of the bundled sample, windows of them, edge
cases, random multi-script strings, and small models of other kinds (softmax, word
n-grams, minn = 1, .bin, quantized output) trained on the fly; it was also checked on
the 272k documents of data/bench_corpus (full text and 200-character windows: no
difference).

Edge cases, as in fastText: an empty or whitespace-only text is predicted from "</s>"
alone (lid.176 says "en", 0.1245); only a model without "</s>" in its dictionary can
have nothing to predict from, and then the answer is ("", 0.0) -- what clean maps
fastText's empty answer to. A str holding a lone surrogate cannot be encoded to UTF-8;
fastText's pybind11 binding then raises TypeError, and so does FastLid. Labels are
returned without the "__label__" prefix. The probability can exceed 1 by a hair (the
1e-5 inside std_log), exactly as fastText's does. Calls hold the GIL (the cache is
shared state), so threads take turns; processes each load their own copy.
"""

from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path

import numpy as np
from .jit import compiled_entry, njit

from algorithms.langid_model import EOS, LABEL_PREFIX, LOSS_HS, read_model

FNV_OFFSET = 2166136261
FNV_PRIME = 16777619
WORD_NGRAM_MULT = np.uint64(116049371)  # Dictionary::addWordNgrams
NO_LABEL = -1

# --------------------------------------------------------------------------------------
# What the kernels read, grouped (a namedtuple passes to numba as one argument).
# --------------------------------------------------------------------------------------

Vocabulary = namedtuple("Vocabulary", [
    "table",         # int32 open-addressing slots -> entry id (-1: empty); hash & mask
    "pool",          # uint8: the entries' words, back to back
    "offsets",       # int64: entry i is pool[offsets[i]:offsets[i + 1]]
    "types",         # int8: 0 word, 1 label
    "lists",         # int64: entry i's input rows are row_lists[lists[i]:lists[i + 1]]
    "eos_id",        # entry of "</s>" (-1: not in the dictionary)
    "eos_hash",      # Dictionary::hash("</s>")
    "label_prefix",  # uint8 b"__label__"
])
Ngrams = namedtuple("Ngrams", [
    "minn", "maxn", "bucket", "word_ngrams",
    "bucket_rows",   # int32 per bucket: its input row, -1 when the pruned model dropped it
    "kept",          # one bit per bucket (bucket_rows >= 0): 250 kB, stays in cache
])
Output = namedtuple("Output", [
    "loss", "n_labels",
    "rows",          # float32 output matrix (unscaled centroids when quantized)
    "norms",         # float32 per row (1 for a dense matrix)
    "left", "right",  # int32 children of each Huffman tree node (-1: a leaf)
])
RowLists = namedtuple("RowLists", [
    "rows",          # int32: lists of input rows, back to back. First the dictionary
                     # entries' subword lists (fixed), then those of recently seen
                     # out-of-vocabulary tokens (a cache, emptied when full)
    "fixed",         # where the cache part starts
    "slots",         # int32 [n, 4] cache slots: (meta = key length | row count << 8,
                     # 0: empty), token hash, key start, rows start. 16 bytes a slot
                     # so that the table stays in the L2 cache
    "keys",          # uint8: the cached tokens' bytes, back to back
    "used",          # int64 [3]: cache entries, key bytes, end of the rows in use
])
SLOT_META, SLOT_HASH, SLOT_KEY, SLOT_START = range(4)
CACHE_SLOTS = 1 << 15       # at most half are used
CACHE_KEY_BYTES = 1 << 19
CACHE_ROWS = 1 << 18        # kept n-grams of a cached token: ~3 on average
CACHE_MAX_TOKEN = 64        # longer tokens (whole Chinese clauses) rarely repeat
LONG_BLOCK = 1 << 12        # a long token's n-grams are added this many bytes at a time
WORD_BUFFER = 1 << 16       # scratch for "<" + token + ">" (grown for longer tokens)


# --------------------------------------------------------------------------------------
# The compiled kernels. Hashes are int64 holding a uint32 value (numba turns mixed
# uint64/int64 arithmetic into floats, so unsigned types are avoided).
#
# Performance note: numba reference-counts every array passed to a function with atomic
# operations, which cost more than the work done per token. So the per-token loop in
# _hidden calls only helpers taking scalars, and reads arrays it has bound to locals
# once per document; array-taking helpers run per document, per long token or per
# cache miss. The cache-miss helpers (_cache_insert, _char_ngrams) are inlined too: a
# cache miss is common enough (a third of English text's bytes are in tokens computed
# afresh) that their calls' reference counting cost 3-6% of the whole.
# --------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _is_space(c):
    """Dictionary::readWord's separators: ' ' \\n \\r \\t \\v \\f \\0."""
    return c == 32 or (9 <= c <= 13) or c == 0


@njit(cache=True, inline="always")
def _fnv(h, c):
    """One FNV-1a step of Dictionary::hash: `h ^ uint32_t(int8_t(c))`, the byte
    sign-extended (bytes >= 0x80 xor 0xFFFFFF80..0xFFFFFFFF), then times the prime."""
    c = np.int64(c)
    if c >= 128:
        c |= 0xFFFFFF00
    return ((h ^ c) * FNV_PRIME) & 0xFFFFFFFF


@njit(cache=True, inline="always")
def _is_continuation(c):
    return (c & 0xC0) == 0x80


@njit(cache=True)
def _word_hash(text, start, end):
    h = np.int64(FNV_OFFSET)
    for i in range(start, end):
        h = _fnv(h, text[i])
    return h


@njit(cache=True, inline="always")
def _wrap(text, start, end, word):
    """word[:] = "<" + text[start:end] + ">" (BOW + token + EOW); returns its length."""
    length = end - start + 2
    word[0] = 60  # '<'
    word[1:length - 1] = text[start:end]
    word[length - 1] = 62  # '>'
    return length


@njit(cache=True, inline="always")
def _char_ngrams(word, length, first, last, ng, out, n_out):
    """Dictionary::computeSubwords over word[:length] ("<" + token + ">"), for the
    n-grams starting at bytes first..last-1: appends to out (from n_out on) the kept
    input rows of every run of minn..maxn UTF-8 characters (a character: a byte that
    is not 0b10xxxxxx, and the continuation bytes after it), except a lone "<" or ">"
    (the n == 1 rule), hashed, taken modulo bucket and mapped through the pruned-bucket
    index (an n-gram the model dropped is skipped). out needs room for every n-gram,
    kept or not: (last - first) * maxn. Returns the new count."""
    kept = ng.kept
    n_first = n_out
    for i in range(first, last):
        if _is_continuation(word[i]):
            continue
        h = np.int64(FNV_OFFSET)
        j = i
        n = 1
        while j < length and n <= ng.maxn:
            h = _fnv(h, word[j])
            j += 1
            while j < length and _is_continuation(word[j]):
                h = _fnv(h, word[j])
                j += 1
            if n >= ng.minn and not (n == 1 and (i == 0 or j == length)):
                # most n-grams were pruned, unpredictably: keep the bucket without a
                # branch (it is overwritten unless kept), map it to its row below
                b = h % ng.bucket
                out[n_out] = b
                n_out += (kept[b >> 3] >> (b & 7)) & 1
            n += 1
    for i in range(n_first, n_out):
        out[i] = ng.bucket_rows[out[i]]
    return n_out


@njit(cache=True)
def _bucket_rows(bucket, nwords, pruneidx_size, pairs):
    """Dictionary::pushHash as a dense array over the buckets: the input row of each
    bucket, or -1 when the pruned model dropped it (pruneidx_size 0 drops all)."""
    out = np.full(bucket, -1, np.int32)
    if pruneidx_size < 0:
        for b in range(bucket):
            out[b] = nwords + b
    else:
        for i in range(pairs.shape[0]):  # later pairs overwrite, like pruneidx_[first] =
            out[pairs[i, 0]] = nwords + pairs[i, 1]
    return out


@njit(cache=True)
def _same_bytes(a, a_start, b, b_start, length):
    for i in range(length):
        if a[a_start + i] != b[b_start + i]:
            return False
    return True


@njit(cache=True)
def _build_vocabulary(pool, offsets, eos_id, ng):
    """The open-addressing table word -> entry id, and each entry's subword list as
    Dictionary::initNgrams makes it: its own id, then the kept char n-grams of "<word>"
    (none for "</s>"). Returns (table, list bounds, the lists back to back)."""
    size = offsets.shape[0] - 1
    nslots = 1
    while nslots < 2 * size + 2:
        nslots *= 2
    table = np.full(nslots, -1, np.int32)
    for i in range(size):
        a, n = offsets[i], offsets[i + 1] - offsets[i]
        slot = _word_hash(pool, a, a + n) & (nslots - 1)
        while table[slot] >= 0:
            e = table[slot]
            if offsets[e + 1] - offsets[e] == n and _same_bytes(pool, offsets[e], pool, a, n):
                break
            slot = (slot + 1) & (nslots - 1)
        table[slot] = i  # a repeated word: the last entry wins, as in Dictionary::load

    longest = 0
    for i in range(size):
        longest = max(longest, offsets[i + 1] - offsets[i])
    ids = np.empty((longest + 2) * max(ng.maxn, 1) + 1, np.int32)
    word = np.empty(longest + 2, np.uint8)
    lists = np.zeros(size + 1, np.int64)
    row_lists = np.empty(16, np.int32)
    n_total = 0
    for i in range(size):
        ids[0] = i
        n = 1
        if i != eos_id:
            length = _wrap(pool, offsets[i], offsets[i + 1], word)
            n = _char_ngrams(word, length, 0, length, ng, ids, 1)
        while n_total + n > row_lists.shape[0]:
            grown = np.empty(2 * row_lists.shape[0], np.int32)
            grown[:n_total] = row_lists[:n_total]
            row_lists = grown
        row_lists[n_total:n_total + n] = ids[:n]
        n_total += n
        lists[i + 1] = n_total
    return table, lists, row_lists[:n_total].copy()


@njit(cache=True)
def _cache_reset(rl):
    rl.slots[:, SLOT_META] = 0
    rl.used[0] = 0
    rl.used[1] = 0
    rl.used[2] = rl.fixed


@njit(cache=True, inline="always")
def _cache_insert(text, start, end, h, slot, ng, rl, word):
    """Computes the rows of the token text[start:end] (not cached yet; slot is the free
    slot its probe ended on) into the cache, emptying it first when full. Returns
    (rows start, rows end) in rl.rows."""
    n_bytes = end - start
    if (2 * (rl.used[0] + 1) > rl.slots.shape[0]
            or rl.used[1] + n_bytes > rl.keys.shape[0]
            or rl.used[2] + (n_bytes + 2) * max(ng.maxn, 1) > rl.rows.shape[0]):
        _cache_reset(rl)
        slot = h & (rl.slots.shape[0] - 1)
    key, a = rl.used[1], rl.used[2]
    rl.keys[key:key + n_bytes] = text[start:end]
    length = _wrap(text, start, end, word)
    b = _char_ngrams(word, length, 0, length, ng, rl.rows, a)
    rl.slots[slot, SLOT_META] = n_bytes | (b - a) << 8
    rl.slots[slot, SLOT_HASH] = np.int32(h)
    rl.slots[slot, SLOT_KEY] = key
    rl.slots[slot, SLOT_START] = a
    rl.used[0] += 1
    rl.used[1] += n_bytes
    rl.used[2] = b
    return a, b


@njit(cache=True)
def _add_long_token(text, start, end, ng, rows, hidden, word, ids):
    """hidden += the rows of the char n-grams of text[start:end], a token too long to
    cache, computed LONG_BLOCK start bytes at a time (so ids has a fixed size; word
    grows for a token longer than it). Returns how many rows were added."""
    if end - start + 2 > word.shape[0]:
        word = np.empty(end - start + 2, np.uint8)
    length = _wrap(text, start, end, word)
    added = 0
    for first in range(0, length, LONG_BLOCK):
        m = _char_ngrams(word, length, first, min(first + LONG_BLOCK, length), ng, ids, 0)
        for i in range(m):  # float32 adds, one row after the other
            r = ids[i]
            for k in range(hidden.shape[0]):
                hidden[k] += rows[r, k]
        added += m
    return added


@njit(cache=True, inline="always")
def _sext32(h):
    """uint32 hash -> int32 (word_hashes is a vector<int32_t>) -> uint64 (sign-extended,
    as `uint64_t h = hashes[i]` and `h * 116049371 + hashes[j]` widen it)."""
    if h >= 0x80000000:
        h -= 0x100000000
    return np.uint64(h)


@njit(cache=True)
def _hidden(text, start, end, v, ng, rows, rl, hidden, word, ids, word_hashes):
    """Dictionary::getLine then Model::computeHidden for the bytes text[start:end]:
    hidden = float32(1.0 / n) * (sum of the n input rows, in fastText's order).
    Returns n (0: nothing to predict from)."""
    table, pool, offsets, types, lists = v.table, v.pool, v.offsets, v.types, v.lists
    label_prefix = v.label_prefix
    row_lists, slots, keys = rl.rows, rl.slots, rl.keys
    table_mask = table.shape[0] - 1
    slot_mask = slots.shape[0] - 1
    dim = hidden.shape[0]
    hidden[:] = 0.0
    n = 0
    n_hashes = 0
    pos = start
    while True:
        # the next token (Dictionary::readWord), hashing it on the way
        while pos < end and _is_space(text[pos]):
            pos += 1
        s = pos
        h = np.int64(FNV_OFFSET)
        while pos < end and not _is_space(text[pos]):
            h = _fnv(h, text[pos])
            pos += 1
        length = pos - s
        if length == 0:  # the end of the line: the "\n" predict appends reads as "</s>"
            h, wid, is_eos = v.eos_hash, v.eos_id, True
        else:
            # the dictionary entry with exactly these bytes, or -1
            wid = -1
            slot = h & table_mask
            while table[slot] >= 0:
                e = table[slot]
                if offsets[e + 1] - offsets[e] == length:
                    same = True
                    for i in range(length):
                        if pool[offsets[e] + i] != text[s + i]:
                            same = False
                            break
                    if same:
                        wid = e
                        break
                slot = (slot + 1) & table_mask
            is_eos = (length == 4 and text[s] == 60 and text[s + 1] == 47  # "</s>"
                      and text[s + 2] == 115 and text[s + 3] == 62)
        if wid >= 0:
            is_word = types[wid] == 0
        else:  # Dictionary::getType(token): a label when it starts with "__label__"
            is_word = True
            if length >= label_prefix.shape[0]:
                is_word = False
                for i in range(label_prefix.shape[0]):
                    if text[s + i] != label_prefix[i]:
                        is_word = True
                        break
        if is_word:  # Dictionary::addSubwords
            a = b = 0
            if wid >= 0:  # the entry's own id, then its subwords
                a, b = lists[wid], lists[wid + 1]
            elif not is_eos and length <= CACHE_MAX_TOKEN:  # char n-grams, via the cache
                slot = h & slot_mask
                h32 = np.int32(h)
                while slots[slot, SLOT_META] != 0:
                    meta = slots[slot, SLOT_META]
                    if (meta & 0xFF) == length and slots[slot, SLOT_HASH] == h32:
                        k0 = slots[slot, SLOT_KEY]
                        same = True
                        for i in range(length):
                            if keys[k0 + i] != text[s + i]:
                                same = False
                                break
                        if same:
                            a = slots[slot, SLOT_START]
                            b = a + (meta >> 8)
                            break
                    slot = (slot + 1) & slot_mask
                if slots[slot, SLOT_META] == 0:
                    a, b = _cache_insert(text, s, pos, h, slot, ng, rl, word)
            elif not is_eos:  # a long token: its char n-grams, not cached
                n += _add_long_token(text, s, pos, ng, rows, hidden, word, ids)
            for i in range(a, b):  # float32 adds, one row after the other
                r = row_lists[i]
                for k in range(dim):
                    hidden[k] += rows[r, k]
            n += b - a
            if ng.word_ngrams > 1:
                word_hashes[n_hashes] = h
                n_hashes += 1
        if is_eos:  # getLine stops at "</s>", the appended one or a literal one
            break
    # Dictionary::addWordNgrams: word n-grams come after all the subwords
    for i in range(n_hashes):
        g = _sext32(np.int64(word_hashes[i]))
        for j in range(i + 1, min(n_hashes, i + ng.word_ngrams)):
            g = g * WORD_NGRAM_MULT + _sext32(np.int64(word_hashes[j]))
            r = ng.bucket_rows[np.int64(g % np.uint64(ng.bucket))]
            if r >= 0:
                for k in range(dim):
                    hidden[k] += rows[r, k]
                n += 1
    if n > 0:
        scale = np.float32(1.0 / n)  # Vector::mul(real): the double 1.0/n as a float
        for k in range(dim):
            hidden[k] *= scale
    return n


@njit(cache=True, inline="always")
def _dot(out, i, hidden):
    """DenseMatrix::dotRow (float32, summed in order), or QuantMatrix::dotRow (the same
    sum over the unscaled centroids, times the norm; the norm is 1 for a dense matrix)."""
    d = np.float32(0.0)
    for k in range(hidden.shape[0]):
        d += out.rows[i, k] * hidden[k]
    return d * out.norms[i]


@njit(cache=True, inline="always")
def _std_log(x):
    """loss.cc std_log: std::log(x + 1e-5) with x a float, computed in double, returned as
    float."""
    return np.float32(np.log(np.float64(x) + 1e-5))


@njit(cache=True)
def _best_hs(hidden, out, stack_node, stack_score):
    """HierarchicalSoftmaxLoss::predict for k = 1, threshold 0: the depth-first search
    from the root, left child first, pruning a subtree whose score is below the best
    leaf found so far (a tie is explored, and a tying later leaf replaces the earlier
    one, as fastText's heap does). Returns (label, score)."""
    threshold = _std_log(np.float32(0.0))
    best_node = np.int64(NO_LABEL)
    best = np.float32(0.0)
    stack_node[0] = 2 * out.n_labels - 2
    stack_score[0] = np.float32(0.0)
    top = 1
    while top > 0:
        top -= 1
        node = stack_node[top]
        score = stack_score[top]
        if score < threshold:
            continue
        if best_node >= 0 and score < best:
            continue
        if out.left[node] == -1 and out.right[node] == -1:
            best_node = node
            best = score
            continue
        f = _dot(out, node - out.n_labels, hidden)
        f = np.float32(1.0 / (np.float32(1.0) + np.exp(-f)))  # expf, then 1. / float
        # the right subtree is searched after the left one: push it first
        stack_node[top] = out.right[node]
        stack_score[top] = score + _std_log(f)
        stack_node[top + 1] = out.left[node]
        stack_score[top + 1] = score + _std_log(np.float32(1.0) - f)
        top += 2
    return best_node, best


@njit(cache=True)
def _best_softmax(hidden, out, output):
    """SoftmaxLoss::computeOutput then Loss::findKBest for k = 1, threshold 0:
    exp is the double exp of the float difference; the best is compared in std_log
    space, a tie going to the later label."""
    for i in range(out.n_labels):
        output[i] = _dot(out, i, hidden)
    top = output[0]
    for i in range(out.n_labels):
        if not (output[i] < top):  # std::max(output[i], max)
            top = output[i]
    z = np.float32(0.0)
    for i in range(out.n_labels):
        output[i] = np.float32(np.exp(np.float64(output[i] - top)))
        z += output[i]
    best_node = np.int64(NO_LABEL)
    best = np.float32(0.0)
    for i in range(out.n_labels):
        output[i] /= z
        if output[i] < np.float32(0.0):
            continue
        score = _std_log(output[i])
        if best_node >= 0 and score < best:
            continue
        best_node = i
        best = score
    return best_node, best


@njit(cache=True)
def _predict_batch(text, bounds, v, ng, rows, out, rl, labels_out, probs_out):
    """Top-1 (label, probability) of each text text[bounds[i]:bounds[i + 1]]; the label is
    -1 when there is nothing to predict from. The probability is expf(score) as in
    FastText::predictLine."""
    n_texts = bounds.shape[0] - 1
    longest = 0
    for i in range(n_texts):
        longest = max(longest, bounds[i + 1] - bounds[i])
    hidden = np.zeros(rows.shape[1], np.float32)
    word = np.empty(min(longest, WORD_BUFFER) + 2, np.uint8)
    ids = np.empty(LONG_BLOCK * max(ng.maxn, 1), np.int32)
    word_hashes = np.empty(longest // 2 + 2 if ng.word_ngrams > 1 else 0, np.uint32)
    stack_node = np.empty(2 * out.n_labels + 2, np.int32)
    stack_score = np.empty(2 * out.n_labels + 2, np.float32)
    output = np.empty(out.n_labels, np.float32)
    for i in range(n_texts):
        n = _hidden(text, bounds[i], bounds[i + 1], v, ng, rows, rl, hidden, word, ids,
                    word_hashes)
        if n == 0:  # FastText::predict: no words, no prediction
            labels_out[i] = NO_LABEL
            probs_out[i] = 0.0
            continue
        if out.loss == LOSS_HS:
            label, score = _best_hs(hidden, out, stack_node, stack_score)
        else:
            label, score = _best_softmax(hidden, out, output)
        labels_out[i] = label
        probs_out[i] = np.exp(score) if label >= 0 else np.float32(0.0)


# --------------------------------------------------------------------------------------
# The hierarchical softmax tree (HierarchicalSoftmaxLoss::buildTree).
# --------------------------------------------------------------------------------------


def _huffman_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right child of each of the 2n-1 nodes (leaves 0..n-1 are the labels, in
    dictionary order; -1: none), built from the label counts exactly as fastText does:
    the counts are sorted decreasing, so the two smallest are taken from the leaf end
    or from the internal nodes made so far, the leaf winning only when strictly smaller."""
    osz = len(counts)
    count = np.full(2 * osz - 1, 10 ** 15, np.int64)
    count[:osz] = counts
    left = np.full(2 * osz - 1, -1, np.int32)
    right = np.full(2 * osz - 1, -1, np.int32)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        mini = [0, 0]
        for j in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini[j] = leaf
                leaf -= 1
            else:
                mini[j] = node
                node += 1
        left[i], right[i] = mini
        count[i] = count[mini[0]] + count[mini[1]]
    return left, right


def _vocabulary(d: dict, ngrams: Ngrams) -> tuple[Vocabulary, np.ndarray]:
    """The dictionary as the kernels read it, and its entries' row lists back to back."""
    words = d["words"]
    offsets = np.zeros(len(words) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, words), np.int64, len(words)), out=offsets[1:])
    pool = np.frombuffer(b"".join(words), np.uint8).copy()
    eos_id = words.index(EOS) if EOS in words else -1
    table, lists, entry_rows = _build_vocabulary(pool, offsets, eos_id, ngrams)
    eos_hash = _word_hash(np.frombuffer(EOS, np.uint8), 0, len(EOS))
    label_prefix = np.frombuffer(LABEL_PREFIX, np.uint8).copy()
    return Vocabulary(table, pool, offsets, d["types"], lists, eos_id, eos_hash,
                      label_prefix), entry_rows


def _row_lists(entry_rows: np.ndarray) -> RowLists:
    """The dictionary's row lists followed by room for the out-of-vocabulary cache."""
    fixed = len(entry_rows)
    rows = np.empty(fixed + CACHE_ROWS, np.int32)
    rows[:fixed] = entry_rows
    return RowLists(rows, fixed, np.zeros((CACHE_SLOTS, 4), np.int32),
                    np.empty(CACHE_KEY_BYTES, np.uint8), np.array([0, 0, fixed], np.int64))


# --------------------------------------------------------------------------------------
# The model.
# --------------------------------------------------------------------------------------

_LOADED: dict[str, FastLid] = {}


class FastLid:
    """A fastText supervised model (lid.176.ftz or .bin) answering predict(text, k=1)."""

    def __init__(self, path: str):
        model = self.read(path)
        args, d = model["args"], model["dictionary"]
        self.path, self.args = path, args
        # Dictionary::getLabel(i) is entry nwords + i
        self.labels = [w.decode("utf-8", "replace").removeprefix("__label__")
                       for w in d["words"][d["nwords"]:]]
        bucket_rows = _bucket_rows(args["bucket"], d["nwords"], d["pruneidx_size"],
                                   d["prune_pairs"])
        ngrams = Ngrams(args["minn"], args["maxn"], args["bucket"], args["wordNgrams"],
                        bucket_rows, np.packbits(bucket_rows >= 0, bitorder="little"))
        vocabulary, entry_rows = _vocabulary(d, ngrams)
        if args["loss"] == LOSS_HS:  # the tree is built from the label counts, in order
            left, right = _huffman_tree(d["counts"][d["types"] == 1])
        else:
            left = right = np.zeros(0, np.int32)
        output = Output(args["loss"], len(self.labels), model["output_rows"],
                        model["output_norms"], left, right)
        # everything _predict_batch reads after (text, bounds), in its order
        self._kernel_args = (vocabulary, ngrams, model["input_rows"], output,
                             _row_lists(entry_rows))
        # label index -> label; index -1 (no label) reads the "" at the end
        self._label_of = np.array(self.labels + [""], dtype=object)
        self._entry = None  # predict()'s direct entry into the compiled _predict_batch

    @staticmethod
    def read(path: str | os.PathLike) -> dict:
        """The model file parsed and checked (ValueError if it is not a supervised model
        with a supported loss), without building anything: milliseconds, no compiling."""
        return read_model(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> FastLid:
        """The model at path, loaded once per process."""
        key = str(Path(path).resolve())
        if key not in _LOADED:
            _LOADED[key] = cls(key)
        return _LOADED[key]

    @property
    def nbytes(self) -> int:
        """Memory held by the loaded model's arrays."""
        arrays = [a for part in self._kernel_args
                  for a in (part if isinstance(part, tuple) else (part,))]
        return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))

    def predict(self, text: str) -> tuple[str, float]:
        """(label, probability) for one text: fastText's predict(text.replace("\\n", " "),
        k=1)[i][0], label without "__label__"; ("", 0.0) when it predicts nothing."""
        data = np.frombuffer(_utf8(text), np.uint8)
        bounds = np.empty(2, np.int64)
        bounds[0], bounds[1] = 0, len(data)
        labels, probs = np.empty(1, np.int32), np.empty(1, np.float32)
        args = (data, bounds, *self._kernel_args, labels, probs)
        if self._entry is None:
            _predict_batch(*args)
            self._entry = compiled_entry(_predict_batch, args)
        else:
            self._entry(*args)
        return self._label_of[labels[0]], float(probs[0])

    def predict_many(self, texts) -> tuple[list[str], np.ndarray]:
        """predict() for each text of a list of str or a pyarrow string array (read from
        its UTF-8 buffers directly; a null is read as ""). Returns (labels, float64
        probabilities)."""
        ids, probs = self.predict_ids(texts)
        return self._label_of[ids].tolist(), probs

    def predict_ids(self, texts) -> tuple[np.ndarray, np.ndarray]:
        """predict_many with label indices into self.labels (-1: no label)."""
        import pyarrow as pa

        if isinstance(texts, pa.ChunkedArray):
            parts = [self._run(*_arrow_bytes(c)) for c in texts.chunks]
            if not parts:
                return np.zeros(0, np.int32), np.zeros(0, np.float64)
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        if isinstance(texts, pa.Array):
            return self._run(*_arrow_bytes(texts))
        return self._run(*_str_bytes(texts))

    def _run(self, data: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(bounds) - 1
        labels = np.empty(n, np.int32)
        probs = np.empty(n, np.float32)
        _predict_batch(data, bounds, *self._kernel_args, labels, probs)
        return labels, probs.astype(np.float64)


def _utf8(text: str) -> bytes:
    """The UTF-8 fastText receives; pybind11 refuses a str that has none (a lone
    surrogate) with TypeError, and so do we."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TypeError(f"text is not valid Unicode (fastText's predict refuses it too): {e}"
                        ) from None


def _arrow_bytes(arr) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, int64 bounds) of a pyarrow string array, read from its buffers."""
    import pyarrow as pa

    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())  # string_view, dictionary, ...
    from .arrays import fill_empty

    arr = fill_empty(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offset_type = np.dtype(np.int64 if pa.types.is_large_string(arr.type) else np.int32)
    if len(arr) == 0:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    bounds = np.frombuffer(offsets_buf, offset_type, len(arr) + 1,
                           arr.offset * offset_type.itemsize).astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, bounds


def _str_bytes(texts) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, int64 bounds) of a sequence of str."""
    encoded = [_utf8(t) for t in texts]
    bounds = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=bounds[1:])
    return np.frombuffer(b"".join(encoded), np.uint8), bounds

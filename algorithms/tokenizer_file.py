"""The one tokenizer loader, shared by every stage and demo that touches token ids."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path


EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = [EOS_TOKEN, "<|im_start|>", "<|im_end|>"] + [f"<|reserved_{i}|>" for i in range(8)]


_LOADED: dict[tuple, object] = {}


def load_tokenizer(path: str | os.PathLike):
    """Load a tokenizers.Tokenizer from tokenizer.json, with a one-line error if unusable.

    Loaded once per process while the file is unchanged (the same path, inode, size and
    modification time): pack's driver needs it for its checks, its fast encoder and HF's,
    and each load of a 32k vocabulary costs about 0.1 s. The object is shared: read it,
    do not modify it (ordinary_tokenizer makes a modified copy)."""
    from tokenizers import Tokenizer

    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ValueError(f"{p} not found; run train_tokenizer.py first") from None
    key = (str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _LOADED:
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise ValueError(f"{p}: not a valid tokenizer.json ({str(e).splitlines()[0]})") from None
        if len(_LOADED) >= 4:
            _LOADED.clear()
        _LOADED[key] = tok
    return _LOADED[key]


# --------------------------------------------------------------------------------------
# What the packer needs: the tokenizer's identity, the uint16 limit, and fast encoding.
# --------------------------------------------------------------------------------------

UINT16_LIMIT = 1 << 16  # ids are stored as uint16 in train.bin (tutorial 4.6)

# GPT-2's split pattern: the regex HF's ByteLevel pre-tokenizer applies (use_regex=True).
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                r"|\s+(?!\S)|\s+")


def max_token_id(tok) -> int:
    """The largest id the tokenizer can emit (model vocabulary and added tokens)."""
    return max(tok.get_vocab(with_added_tokens=True).values())


def check_fits_uint16(tok, path: str | os.PathLike) -> None:
    """Refuse a vocabulary whose largest id does not fit in uint16 (tutorial 4.6)."""
    top = max_token_id(tok)
    if top >= UINT16_LIMIT:
        raise ValueError(f"{path}: largest token id {top:,} does not fit in uint16 "
                         f"(max {UINT16_LIMIT - 1:,}); train a vocabulary below 65,536 "
                         "(train_tokenizer.py --vocab-size) or store the ids as uint32")


def eos_id(tok, path: str | os.PathLike = "tokenizer.json") -> int:
    i = tok.token_to_id(EOS_TOKEN)
    if i is None:
        raise ValueError(f"{path}: no {EOS_TOKEN} token; train the tokenizer with "
                         "SPECIAL_TOKENS (train_tokenizer.py)")
    return i


def ordinary_tokenizer(tok):
    """A copy of `tok` that encodes document text only: its added (special) tokens are
    dropped, so a literal "<|endoftext|>" inside a document becomes ordinary byte-level
    tokens and the only EOS ids in train.bin are the ones the packer appends (5.3).
    Ids are unchanged: the special tokens stay in the model's vocabulary.

    When every added token is special (this suite's tokenizers, GPT-2's), the copy keeps
    them and is told to encode them as plain text (encode_special_tokens): the same ids,
    in less than half the time of rebuilding the tokenizer without them (0.10 s against
    0.25 for a 32k vocabulary, paid by pack's driver before any work)."""
    import json

    from tokenizers import Tokenizer

    if added_all_special(tok):
        plain = Tokenizer.from_str(tok.to_str())
        plain.encode_special_tokens = True
        return plain
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))


def added_all_special(tok) -> bool:
    """Whether every added token of `tok` is special: then its strings can be read as
    plain text by a flag (encode_special_tokens), without rebuilding the tokenizer."""
    return all(t.special for t in tok.get_added_tokens_decoder().values())


@contextmanager
def plain_text(tok):
    """ordinary_tokenizer(tok) for the duration of a `with`, without copying `tok` when
    every added token is special: the shared object is told to encode their strings as
    plain text, and told back after. Pack's identity check and its HF encoder use it: a
    copy of a 32k vocabulary costs its driver 0.08 s before any work. Not for a `tok`
    that another thread encodes with at the same time."""
    if not added_all_special(tok):
        yield ordinary_tokenizer(tok)
        return
    before = tok.encode_special_tokens
    tok.encode_special_tokens = True
    try:
        yield tok
    finally:
        tok.encode_special_tokens = before


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-unicode map, reversed: the printable character HF's ByteLevel
    stores in the vocabulary for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def byte_level_unsupported(tok, spec: dict | None = None) -> str | None:
    """Why `tok` is not a plain byte-level BPE (None when it is); `spec`: its JSON,
    already parsed (json.loads(tok.to_str())), when the caller has it.

    The fast encoders (algorithms/packing_fast.py, tiktoken) reproduce only that: no normalizer,
    a ByteLevel pre-tokenizer with GPT-2's regex and no prefix space, and a BPE model
    without dropout, subword prefixes/suffixes, byte fallback or ignore_merges."""
    import json

    if spec is None:
        spec = json.loads(tok.to_str())
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE":
        return f"model is {model.get('type')}, not BPE"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"BPE {key}={model[key]!r}"
    if model.get("byte_fallback"):
        return "BPE byte_fallback"
    if model.get("ignore_merges"):
        return "BPE ignore_merges"
    if spec.get("normalizer"):
        return f"normalizer {spec['normalizer'].get('type')}"
    if pre.get("type") != "ByteLevel":
        return f"pre-tokenizer is {pre.get('type')}, not ByteLevel"
    if pre.get("add_prefix_space"):
        return "ByteLevel add_prefix_space=True"
    if not pre.get("use_regex", True):
        return "ByteLevel use_regex=False"
    return None


def to_tiktoken(tok, name: str = "self_trained"):
    """The same vocabulary as a tiktoken Encoding, or None when it does not convert.

    tiktoken's BPE merges by the rank of the merged token; an HF-trained BPE adds tokens
    in merge order, so using each token's id as its rank reproduces HF's merges (ANCHORS:
    identical ids on 7,891 documents). Tokens are turned back into bytes with the GPT-2
    byte map; the special tokens keep their ids. Callers still compare ids on real text
    (pack_parallel.py does at start) because the equivalence is empirical, not proven.
    """
    import tiktoken

    if byte_level_unsupported(tok):
        return None
    dec = byte_decoder()
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    ranks: dict[bytes, int] = {}
    for token, i in tok.get_vocab(with_added_tokens=False).items():
        if token in added:
            continue
        try:
            ranks[bytes(dec[c] for c in token)] = i
        except KeyError:  # a character outside the byte map: not a byte-level vocabulary
            return None
    if len(ranks) < 256 or any(bytes([b]) not in ranks for b in range(256)):
        return None  # tiktoken needs every single byte as a token
    special = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    try:
        return tiktoken.Encoding(name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens=special)
    except Exception:  # duplicate ranks and similar: fall back to HF
        return None


# HF keeps about 150 bytes for each token of every encoding in a batch until the call
# returns (3 GB for one 20 MB document): long texts are counted in pieces, a batch of
# pieces at a time.
PIECE_CHARS = 1 << 16
BATCH_CHARS = 1 << 20
# Where the GPT-2 split pattern (ByteLevel's) always cuts, so that cutting the text there
# changes no token: before a lone space or newline between two non-space characters, and
# between common punctuation and a letter or digit, as in "。中". The punctuation is
# named, not a class: a character newer than Python's Unicode tables may be a letter to
# the tokenizer's; and the apostrophe is not in it ("'s" is one piece).
_PUNCT = re.escape("!\"#$%&()*+,-./:;<=>?@[\\]^`{|}~，。！？；：、（）《》〈〉【】「」『』“”‘’…—·")
_CUT = re.compile(r"(?<=\S)[ \n](?=\S)|(?<=[" + _PUNCT + r"])(?=[^\W_])")


def pieces(text: str, size: int = PIECE_CHARS, hard: bool = True) -> list[str]:
    """`text` in pieces of about `size` characters, each cut where _CUT says the tokenizer
    cuts too (the last such place in the piece's second half), so that the pieces' ids,
    joined, are the text's. A stretch without such a place is cut at `size` (hard: the
    ids near that cut may differ; counts for an estimate) or left whole (not hard)."""
    out, start = [], 0
    while len(text) - start > size:
        end = start + size
        cuts = [m.start() for m in _CUT.finditer(text, start + size // 2, end)]
        if cuts:
            cut = cuts[-1]
        elif hard:
            cut = end
        else:   # the next place to cut, however far
            m = _CUT.search(text, end)
            if m is None:
                break
            cut = m.start()
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def splits_like_gpt2(tok) -> bool:
    """Whether `tok` cuts text where _CUT does: no normalizer, and a ByteLevel pre-tokenizer
    with GPT-2's regex and no prefix space (the model then encodes each piece alone)."""
    from tokenizers import pre_tokenizers

    pre = tok.pre_tokenizer
    return (tok.normalizer is None and isinstance(pre, pre_tokenizers.ByteLevel)
            and pre.use_regex and not pre.add_prefix_space)


def piece_batches(texts: list[str], piece: int = PIECE_CHARS, batch: int = BATCH_CHARS,
                  hard: bool = True, cut: bool = True):
    """Lists of (text index, piece) of about `batch` characters each: every text's
    pieces (pieces()), in order; each text whole when not `cut`."""
    todo: list[tuple[int, str]] = []
    size = 0
    for i, text in enumerate(texts):
        for p in (pieces(text, piece, hard) if cut else [text]):
            todo.append((i, p))
            size += len(p)
            if size >= batch:
                yield todo
                todo, size = [], 0
    if todo:
        yield todo


def encode_bounded(plain, texts: list[str], piece: int = PIECE_CHARS,
                   batch: int = BATCH_CHARS) -> list[list[int]]:
    """plain.encode_batch_fast(texts)'s ids (plain: ordinary_tokenizer's), with HF's memory
    bounded: about `batch` characters per call, and a long text in pieces cut only where
    the split pattern cuts, so the ids are the same (a tokenizer that does not split like
    GPT-2 gets its texts whole)."""
    out: list[list[int]] = [[] for _ in texts]
    for todo in piece_batches(texts, piece, batch, hard=False, cut=splits_like_gpt2(plain)):
        encs = plain.encode_batch_fast([p for _, p in todo], add_special_tokens=False)
        for (i, _), e in zip(todo, encs):
            out[i].extend(e.ids)
    return out

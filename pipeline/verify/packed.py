"""verify.py's item 1: train.bin and val.bin are what pack_parallel.py's manifest records
(size and digest, the tokenizer they were packed with), and hold as many tokens as
section 5.6's estimate says (input bytes / bytes per token on a sample).
"""

from __future__ import annotations

from algorithms.tokenizer_checks import token_counts
from pipeline.shards import file_digest, matches_record
from pipeline.tables import human_bytes
from pipeline.verify.context import PACK_MANIFEST, Context, Item


def check_files(ctx: Context) -> Item:
    it = Item(1, "train.bin and val.bin exist, match the manifest (size and digest) and the "
                 "estimate")
    c = ctx.pack_counts
    for s in ("train", "val"):
        p = ctx.data / f"{s}.bin"
        if not p.exists():
            it.fail(f"{p} missing", "pack_parallel.py did not finish; rerun pack_parallel.py")
            continue
        want = 2 * c[s]["tokens"]
        size = p.stat().st_size
        it.figures.append(f"{s}.bin: {size:,} bytes = 2 x {c[s]['tokens']:,} tokens"
                          if size == want else f"{s}.bin: {size:,} bytes")
        if size != want:
            it.fail(f"{s}.bin is {size:,} bytes, manifest says 2 x {c[s]['tokens']:,} = {want:,}",
                    "the .bin was changed or truncated after packing; rerun pack_parallel.py")
    # the bytes, not only the sizes: a token changed in place keeps the size
    for rec in ctx.pack.get("files", []):
        p = ctx.data / rec["name"]
        if p.is_file() and p.stat().st_size == rec["size"] and not matches_record(p, rec):
            it.fail(f"{p} does not match its xxh3-128 digest in {PACK_MANIFEST}",
                    "it was changed after packing; rerun pack_parallel.py")
    h = file_digest(ctx.tokenizer_path)
    if h != c["tokenizer"]["xxh3_128"]:
        it.fail(f"{ctx.tokenizer_path} changed since packing (hash {h[:12]} vs "
                f"{c['tokenizer']['xxh3_128'][:12]})",
                "the tokenizer was retrained after packing; rerun pack_parallel.py")
    # 5.6: estimate = input bytes / (bytes per token on a 1% sample, at most ~20 MB, EOS
    # included: a larger sample changes the estimate by far less than the tolerance).
    # Without 5.6's "* 1.05": that 5% is headroom for preallocating a memmap, and here the
    # estimate is compared with the count packed (with it, a right count reads -4.8%).
    sample = ctx.corpus["sample"] or list(ctx.corpus["val"].values())
    s_bytes = sum(len(t.encode("utf-8")) for t in sample)
    s_tokens = sum(token_counts(ctx.doc_tok, sample)) + len(sample)   # + an EOS each
    bpt = s_bytes / s_tokens
    est = c["bytes_out"] / bpt
    tokens = c["train"]["tokens"] + c["val"]["tokens"]
    dev = tokens / est - 1
    it.figures.append(f"estimate {est:,.0f} tokens ({human_bytes(c['bytes_out'])} / {bpt:.3f} "
                      f"bytes per token on a {len(sample):,}-document sample, 5.6); packed "
                      f"{tokens:,} ({dev:+.1%}, tolerance ±{ctx.args.size_tolerance:.0%})")
    if abs(dev) > ctx.args.size_tolerance:
        it.fail(f"token count is {dev:+.1%} off the estimate",
                "documents were lost or duplicated while packing, or the input changed; "
                "rerun pack_parallel.py")
    return it

"""verify.py's item 9: the whole pipeline ran end to end on the smoke data set (the sample
or TinyStories), every manifest of the chain fresh, the tokenizer train_tokenizer.py's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import layout
from pipeline.errors import StageError
from pipeline.manifest import check_input, read_manifest, source_name
from pipeline.verify.context import PACK_MANIFEST, Context, Item

SMOKE_DATASETS = ("sample", "tinystories")


def check_smoke_run(ctx: Context) -> Item:
    it = Item(9, "the pipeline ran end to end on the smoke data set")
    root = Path(ctx.args.smoke_dir) if ctx.args.smoke_dir else ctx.data
    sub = ctx if root == ctx.data else Context(argparse.Namespace(**{**vars(ctx.args),
                                                                     "data_dir": str(root)}))
    chain = sub.chain
    stages = [m.get("stage") for _, m in reversed(chain)]
    raw = chain[-1][1]
    dataset = (raw.get("config") or {}).get("dataset")
    what = source_name(raw.get("config") or {})
    it.figures.append(f"{root}: " + " -> ".join(stages) + f" (dataset: {what})")
    missing = [s for s in ("download_data", "clean", "dedup_exact", "dedup_minhash",
                           "pack_parallel") if s not in stages]
    if missing:
        it.fail(f"stages missing from the chain: {', '.join(missing)}",
                f"run {layout.STAGES[missing[0]][0]} and the stages after it (make demo)")
    tok_in = (sub.pack.get("extra_inputs") or {}).get("tokenizer")
    if not tok_in:
        it.fail("pack_manifest.json records no train_tokenizer manifest",
                "the tokenizer was not made by train_tokenizer.py; run it, then pack_parallel.py")
    else:
        it.figures.append(f"tokenizer from train_tokenizer.py ({tok_in['manifest']})")
        try:   # the tokenizer is part of the chain too: retrained since, pack is stale
            now = read_manifest(root / tok_in["manifest"]).get("output_fingerprint")
        except StageError as e:
            now = None
            it.fail(str(e), "run train_tokenizer.py, then pack_parallel.py")
        if now is not None and now != tok_in.get("fingerprint"):
            it.fail(f"{root / tok_in['manifest']} changed after pack_parallel.py read it",
                    "the tokenizer was retrained after packing; rerun pack_parallel.py")
    if dataset not in SMOKE_DATASETS:
        it.fail(f"{root} was built from {what}, not a smoke data set",
                "run the pipeline on the sample (make demo) and pass its folder as --smoke-dir")
    try:
        check_input(root / PACK_MANIFEST)
        if it.ok:
            it.figures.append("every manifest in the chain is fresh (fingerprints match)")
    except StageError as e:
        it.fail(str(e), "a stage was rerun without the stages after it")
    return it

"""verify.py's item 10: nothing lost. The manifests chain from the raw download to the
packed output, and at every stage documents in = documents kept + documents removed.
"""

from __future__ import annotations

from pipeline.tables import table
from pipeline.verify.context import Context, Item


def check_nothing_lost(ctx: Context) -> Item:
    it = Item(10, "nothing lost: manifests chain from raw to packed and the counts add up")
    chain = list(reversed(ctx.chain))  # raw first
    if chain[0][1].get("stage") != "download_data":
        it.fail(f"the chain starts at {chain[0][0]}, not at a download_data manifest",
                "rerun the pipeline from download_data.py")
    prev_docs = prev_bytes = None
    rows = []
    for p, m in chain:
        stage, c = m.get("stage"), m.get("counts") or {}
        script = m.get("script", f"{stage}.py")
        if stage == "download_data":
            docs_out, bytes_out = c.get("rows"), c.get("text_bytes")
            rows.append([stage, "", docs_out, "", ""])
        else:
            need = [k for k in ("docs_in", "docs_out", "removed") if k not in c]
            if need:
                it.fail(f"{stage} manifest lacks {', '.join(need)}", f"rerun {script}")
                break
            removed = sum((c.get("removed") or {}).values())
            docs_out, bytes_out = c["docs_out"], c.get("bytes_out")
            rows.append([stage, c["docs_in"], docs_out, removed,
                         ", ".join(f"{k} {v:,}" for k, v in (c.get("removed") or {}).items())])
            if c["docs_in"] != docs_out + removed:
                it.fail(f"{stage}: {c['docs_in']:,} in != {docs_out:,} kept + {removed:,} removed",
                        f"{script} dropped documents without counting them; fix and rerun it")
            if prev_docs is not None and c["docs_in"] != prev_docs:
                it.fail(f"{stage} read {c['docs_in']:,} documents, the stage before wrote "
                        f"{prev_docs:,}", f"rerun {script}")
            if prev_bytes is not None and c.get("bytes_in") not in (None, prev_bytes):
                it.fail(f"{stage} read {c['bytes_in']:,} bytes, the stage before wrote "
                        f"{prev_bytes:,}", f"rerun {script}")
        prev_docs, prev_bytes = docs_out, bytes_out
    it.details.append(table(["stage", "docs in", "docs out", "removed", "by reason"], rows))
    pc = ctx.pack_counts
    packed = pc["train"]["docs"] + pc["val"]["docs"]
    it.figures.append(" -> ".join(f"{r[0]} {r[2]:,}" for r in rows if isinstance(r[2], int))
                      + f"; packed {packed:,} documents ({pc['train']['docs']:,} train + "
                      f"{pc['val']['docs']:,} val)")
    if packed != pc["docs_out"]:
        it.fail(f"train + val documents {packed:,} != pack docs_out {pc['docs_out']:,}",
                "packer lost documents; rerun pack_parallel.py")
    return it

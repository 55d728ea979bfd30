"""verify.py's report: the checklist printed, and written as Markdown with its JSON (by
pipeline.stage.ReportStage, whole, the previous pair kept when a write fails).

A write of verify.py's own that fails (its work folder, the report: a full disk, a size
limit, a read-only folder) is one line naming the path, exit 2, and the previous report
kept: a FAIL (exit 1) would blame the data for it.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from pipeline.manifest import MANIFEST, display_path
from pipeline.tables import markdown_table
from pipeline.verify.context import PACK_MANIFEST, Context, Item
from pipeline.verify.scan import SCAN

REPORT_NAME = "verify_report.md"
REPORT_HEAD = "# Acceptance checklist (verify.py)"   # the report's first line begins so
# what only a write gets: whichever file it names, verify.py's own output failed, not the data
WRITE_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def own_write_failed(e: BaseException, ctx: Context) -> bool:
    """Whether `e` is a write of verify.py's own that failed (its work folder SCAN, where the
    scan of items 1, 7 and 8 puts band hashes, samples and logs), not a check that could
    not read its input. A full disk, a quota, a size limit or a read-only file system
    happen only to a write; another error (no permission, a file in the way) is its own
    only when it names a path in the work folder: the same error on an input is a FAIL."""
    if not isinstance(e, OSError):
        return False
    if e.errno in WRITE_ONLY:
        return True
    work = (ctx.data / SCAN).absolute()
    names = [Path(os.fsdecode(f)).absolute() for f in (e.filename, e.filename2)
             if isinstance(f, (str, bytes, os.PathLike))]
    return any(f == work or work in f.parents for f in names)


def render_terminal(items: list[Item]) -> str:
    out = []
    for it in items:
        out.append(f"[{'PASS' if it.ok else 'FAIL'}] {it.num}. {it.title}")
        out += [f"    {f}" for f in it.figures]
        for d in it.details:
            out += [f"    {line}" for line in d.splitlines()]
        if not it.ok:
            out.append(f"    likely cause / rerun: {it.cause}")
    passed = sum(it.ok for it in items)
    out.append(f"checklist: {passed} of {len(items)} items PASS, {len(items) - passed} FAIL")
    return "\n".join(out)


def render_markdown(items: list[Item], data_dir: Path) -> str:
    md = [f"{REPORT_HEAD} for `{data_dir}`", "",
          markdown_table(["#", "item", "result", "likely cause / rerun"],
                         [[it.num, it.title, "PASS" if it.ok else "**FAIL**", it.cause or ""]
                          for it in items]), ""]
    for it in items:
        md += [f"## {it.num}. {it.title}: {'PASS' if it.ok else 'FAIL'}", ""]
        md += [f"- {f}" for f in it.figures]
        if not it.ok:
            md.append(f"- likely cause / rerun: {it.cause}")
        for d in it.details:
            md += ["", "```", d, "```"]
        md.append("")
    return "\n".join(md)


def report_data(items: list[Item], data: Path) -> dict:
    """The same items as data, for the JSON beside the Markdown (report.py's page reads
    it, and anyone's script may), with the manifests they were checked against; the run's
    resources are added when it is written."""
    return {"data_dir": display_path(data), "passed": sum(it.ok for it in items),
            "items": [{"num": it.num, "title": it.title, "ok": it.ok, "figures": it.figures,
                       "details": it.details, "cause": it.cause, **it.data} for it in items],
            "manifests": manifest_fingerprints(data)}


def manifest_fingerprints(data: Path) -> dict[str, str]:
    """Each stage manifest's output fingerprint as verify.py saw it (relative path ->
    fingerprint): the checklist is stale once any of them changes."""
    out = {}
    for m in sorted(list(data.glob(f"*/{MANIFEST}")) + [data / PACK_MANIFEST]):
        try:
            out[str(m.relative_to(data))] = str(json.loads(m.read_text())["output_fingerprint"])
        except (OSError, ValueError, KeyError, TypeError):   # unreadable: the items say so
            continue
    return out

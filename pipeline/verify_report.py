"""verify.py's report: the checklist printed, and written as Markdown with its JSON.

The report and its .json are written whole under temporary names before either replaces
the previous pair. A write of verify.py's own that fails (its work folder, the report: a
full disk, a size limit, a read-only folder) is one line naming the path, exit 2, and
the previous report kept: a FAIL (exit 1) would blame the data for it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path

from pipeline.disk import IN_THE_WAY, WRITE_ERRORS, free_bytes, temporary_beside
from pipeline.errors import StageError
from pipeline.manifest import MANIFEST, display_path, write_json
from pipeline.tables import human_bytes, markdown_table
from pipeline.verify_context import PACK_MANIFEST, Context, Item
from pipeline.verify_scan import SCAN

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


def write_failed(e: OSError, path: Path, report: Path) -> StageError:
    """The one line for a write of verify.py's own that failed: the path, why, and that the
    previous report is kept. A StageError, so exit 2 as every stage's write errors: exit 1
    says a check FAILed, which a full disk says nothing about."""
    why = WRITE_ERRORS.get(e.errno) or IN_THE_WAY.get(e.errno) or e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        with contextlib.suppress(OSError):
            why += f" ({human_bytes(free_bytes(path.parent))} free)"
    kept = (f"the previous report {display_path(report)} is unchanged" if report.is_file()
            else "no report was written")
    return StageError(f"cannot write {display_path(path)}: {why}; {kept}")


def report_path(ctx: Context) -> Path:
    return Path(ctx.args.report) if ctx.args.report else ctx.data / REPORT_NAME


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


def write_report(report: Path, markdown: str, data: dict) -> None:
    """Write the report (Markdown) and its .json, both whole under temporary names before
    either is renamed over the previous one: a write that fails (a full disk, a size
    limit, a read-only folder) leaves the previous pair as it was, without temporary
    files, and stops with one line (write_failed) instead of a traceback."""
    js = report.with_suffix(".json")
    # names of their own (never a file of the user's, such as report.md.tmp)
    md_tmp, js_tmp = temporary_beside(report), temporary_beside(js)
    where = report
    try:
        md_tmp.write_text(markdown, encoding="utf-8")
        where = js
        write_json(js_tmp, data)
        where = report
        os.replace(md_tmp, report)
        where = js
        os.replace(js_tmp, js)
    except OSError as e:
        for tmp in (md_tmp, js_tmp, js_tmp.with_name(js_tmp.name + ".tmp")):  # and write_json's
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise write_failed(e, where, report) from None


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


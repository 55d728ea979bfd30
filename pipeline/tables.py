"""Stats tables: printed to the terminal, saved as JSON and Markdown beside the output."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from .manifest import write_json


def _width(s: str) -> int:
    """Terminal width of s (CJK characters take two columns)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _pad(s: str, w: int, right: bool) -> str:
    fill = " " * max(0, w - _width(s))
    return fill + s if right else s + fill


def table(headers: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """An aligned plain-text table; numeric columns are right-aligned."""
    cells = [[_fmt(c) for c in r] for r in rows]
    if right is None:
        right = {i for i in range(len(headers))
                 if rows and all(isinstance(r[i], (int, float)) or _numeric(str(r[i])) for r in rows)}
    widths = [max([_width(h)] + [_width(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = ["  ".join(_pad(h, widths[i], i in right) for i, h in enumerate(headers)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(_pad(c, widths[i], i in right) for i, c in enumerate(r)) for r in cells]
    return "\n".join(out)


def markdown_table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_fmt(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def _fmt(c) -> str:
    if isinstance(c, bool):
        return str(c)
    if isinstance(c, int):
        return f"{c:,}"
    if isinstance(c, float):
        return f"{c:,.4f}" if abs(c) < 10 else f"{c:,.1f}"
    return str(c)


def _numeric(s: str) -> bool:
    s = s.replace(",", "").replace("%", "").strip()
    try:
        float(s)
        return True
    except ValueError:
        return False


def snippet(text: str | None, n: int = 160) -> str:
    """A document's text on one line, whitespace collapsed, cut to n characters."""
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[:n] + "..."


def pct(n: int, total: int) -> str:
    return f"{(100.0 * n / total) if total else 0.0:.2f}%"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9,
              "GB": 10**9, "T": 10**12, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
              "GIB": 2**30, "TIB": 2**40}


def size_bytes(s: str) -> int:
    """'2GB', '512MB', '1GiB', '1.5GB', '1000000' -> bytes (the inverse of human_bytes);
    a sign is read too, so that whoever asked says what range is allowed; ValueError,
    saying what is expected, for anything else."""
    m = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+)\s*([KMGT]?I?B?)\s*", str(s).upper())
    if not m:
        raise ValueError(f"{s!r}: expected a size like 2GB, 512MB or 1000000")
    number, unit = m.groups()
    if unit not in SIZE_UNITS:
        raise ValueError(f"{s!r}: unknown unit {unit!r}")
    if number.lstrip("+-").isdigit():   # exact, however large
        return int(number) * SIZE_UNITS[unit]
    return int(float(number) * SIZE_UNITS[unit])


def parse_size(s: str, flag: str) -> int:
    """A size as a person types it, for the command-line flag `flag` (size_bytes), above
    zero. A bad one is a one-line error."""
    from .errors import StageError

    try:
        n = size_bytes(s)
    except ValueError as e:
        raise StageError(f"{flag} {e}") from None
    if n <= 0:
        raise StageError(f"{flag} {s!r} must be positive")
    return n


def size_arg(s: str) -> int:
    """The argparse type of every flag that is a number of bytes (--max-bytes,
    --shard-bytes, --check-bytes, ...): a size as size_bytes reads it, so `--max-bytes
    500MB` and `--max-bytes 500000000` are the same run; the stage checks its range."""
    import argparse

    try:
        return size_bytes(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def save_report(folder: str | os.PathLike, name: str, data: dict, markdown: str) -> None:
    """Write `<name>.json` and `<name>.md` into folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"{name}.json", data)
    tmp = folder / f"{name}.md.tmp"
    tmp.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    os.replace(tmp, folder / f"{name}.md")


def window_text(text: str) -> str:
    """A decoded window of train.bin as a person reads it: a character its ends cut
    (decoded as a replacement character, which verify.py does not count) shown as "…"."""
    core = text.strip("\ufffd")
    head = "…" if text.startswith("\ufffd") else ""
    tail = "…" if text.endswith("\ufffd") and core else ""
    return head + core + tail

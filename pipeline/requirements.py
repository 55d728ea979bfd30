"""The requirements files, and the one line that names the file to install when a package
a command needs is missing.

requirements.txt holds what the stages, the demos and report.py need on one machine
(`make demo`). The others install on top of it: requirements-compare.txt the reference
tokenizers of compare_tokenizers.py, requirements-cluster.txt Ray (--executor ray),
requirements-bench.txt the benchmarks' anchors (`make bench`), requirements-dev.txt all
three and what the tests need (`make test`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_line(what: str, packages: list[str], requirements: str) -> str:
    """"WHAT needs a, b: pip install -r FILE"."""
    return f"{what} needs {', '.join(packages)}: pip install -r {requirements}"


def missing_modules(modules: dict[str, str]) -> list[str]:
    """The packages (pip's names) of `modules` (package -> the module it installs) whose
    module cannot be found. Nothing is imported (a dotted module imports its parent)."""
    gone = []
    for package, module in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:   # the parent of a dotted module is missing
            found = False
        if not found:
            gone.append(package)
    return gone


def listed(requirements: str | os.PathLike) -> list[str]:
    """The packages a requirements file pins, with those of the files it includes (-r)."""
    path = ROOT / requirements
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            out += [p for p in listed(path.parent / line[2:].strip()) if p not in out]
        elif line:
            out.append(re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0])
    return out


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(packages: list[str]) -> list[str]:
    """Those of `packages` (pip's names) not installed."""
    installed = {_key(d.metadata["Name"] or "") for d in metadata.distributions()}
    return [p for p in packages if _key(p) not in installed]


def missing_from(requirements: str | os.PathLike) -> list[str]:
    """The packages of a requirements file (and of those it includes) not installed."""
    return missing(listed(requirements))


def require(what: str, requirements: str, packages: list[str] | None = None) -> None:
    """Exit with one line and status 2 unless `packages` (default: every package the file
    lists) are installed: for the benchmarks and scripts, which do not run as a stage."""
    gone = missing_from(requirements) if packages is None else missing(packages)
    if gone:
        print(f"error: {install_line(what, gone, requirements)}", file=sys.stderr)
        sys.exit(2)

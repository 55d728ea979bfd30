"""The requirements files: requirements.txt is what the stages, the demos and report.py
import; the benchmarks, the cluster, the compression table's references and the tests
install on top of it, and a missing one is one line naming its file."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pipeline.requirements import listed, missing_from

ROOT = Path(__file__).resolve().parent.parent
FILES = ["requirements.txt", "requirements-compare.txt", "requirements-cluster.txt",
         "requirements-bench.txt", "requirements-dev.txt"]
# the imports a stage makes of a package outside requirements.txt, each where one line
# names the file that installs it (pipeline/executors.py: NO_RAY; compare_tokenizers.py:
# candidates)
GUARDED = {"ray": "requirements-cluster.txt", "sentencepiece": "requirements-compare.txt"}


def own(name: str) -> list[str]:
    """The packages a file pins itself (not those of the files it includes)."""
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / name).read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("-r")]


def test_each_package_is_pinned_exactly_once():
    pins = [p for f in FILES for p in own(f)]
    assert all("==" in p for p in pins), pins
    names = [p.split("==")[0].lower() for p in pins]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_each_file_installs_on_top_of_requirements_txt_and_dev_holds_them_all():
    for f in FILES[1:]:
        assert set(listed("requirements.txt")) <= set(listed(f)), f
    assert set(listed("requirements-dev.txt")) == {p for f in FILES for p in listed(f)}
    assert missing_from("requirements-dev.txt") == []   # what the tests run against


def test_a_missing_package_is_one_line_naming_the_file(tmp_path):
    req = tmp_path / "requirements-extra.txt"
    req.write_text(f"-r {ROOT / 'requirements.txt'}\nno-such-package-here==1.0  # a note\n")
    assert missing_from(req) == ["no-such-package-here"]
    code = ("from pipeline.requirements import require\n"
            f"require('bench/x.py', {str(req)!r})\n"
            "print('went on')\n")
    cp = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert cp.returncode == 2 and cp.stdout == ""
    assert cp.stderr == f"error: bench/x.py needs no-such-package-here: pip install -r {req}\n"


def imported(paths: list[Path]) -> dict[str, str]:
    """Every top-level module the files import, at any depth: module -> a file importing it."""
    out = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                out.setdefault(n.split(".")[0], str(path.relative_to(ROOT)))
    return out


def key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_by(requirements: str) -> set[str]:
    """The packages a requirements file installs: those it lists and their dependencies
    (but extras), as the installed packages' metadata declares them."""
    todo, seen = [key(p) for p in listed(requirements)], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:   # for another platform (a marker)
            continue
        seen.add(name)
        for req in requires:
            if "extra ==" not in req:
                todo.append(key(re.match(r"[A-Za-z0-9._-]+", req).group()))
    return seen


def outside(paths: list[Path], requirements: str) -> dict[str, str]:
    """The modules the files import that are neither Python's, this repository's, nor
    installed by `requirements` (module -> a file importing it)."""
    local = {p.stem for p in ROOT.glob("*.py")} | {"pipeline", "algorithms"}
    local |= {p.stem for d in ("bench", "scripts", "tests") for p in (ROOT / d).glob("*.py")}
    packages, by_module = installed_by(requirements), metadata.packages_distributions()
    return {m: f for m, f in imported(paths).items()
            if m not in sys.stdlib_module_names and m not in local and m != "__future__"
            and not {key(d) for d in by_module.get(m, [])} & packages}


def test_the_stages_demos_and_report_import_only_what_requirements_txt_installs():
    files = sorted(ROOT.glob("*.py")) + sorted((ROOT / "pipeline").glob("*.py"))
    files += sorted((ROOT / "algorithms").glob("*.py"))
    assert outside(files, "requirements.txt").keys() == GUARDED.keys()
    for module, req in GUARDED.items():
        assert module not in outside(files, req)


def test_the_benchmarks_and_scripts_need_requirements_bench_txt_and_the_tests_dev():
    bench = sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    assert outside(bench, "requirements-bench.txt") == {}
    assert outside(sorted((ROOT / "tests").glob("*.py")), "requirements-dev.txt") == {}

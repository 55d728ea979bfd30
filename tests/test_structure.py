"""The structure a learner and a maintainer rely on: stage scripts do not import each
other (their algorithms live in algorithms/, their machinery in pipeline/), and neither
do the tools, demos, benchmarks and scripts that use them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.stem for p in ROOT.glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code (top-level names)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_scripts_are_the_ones_we_think():
    assert {"download_data", "clean", "dedup_exact", "dedup_minhash", "train_tokenizer",
            "pack_parallel", "verify", "report", "compare_tokenizers", "minhash_demo",
            "bpe_demo"} <= set(SCRIPTS)


def test_no_script_imports_another_script():
    users = [ROOT / f"{s}.py" for s in SCRIPTS]
    users += sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    # pipeline's packages too (pipeline/verify/, pipeline/report/)
    users += sorted((ROOT / "pipeline").rglob("*.py")) + sorted((ROOT / "algorithms").glob("*.py"))
    found = {}
    for f in users:
        own = {f.stem} if f.parent == ROOT else set()   # pipeline/verify/report.py is no script
        bad = imported_modules(f) & set(SCRIPTS) - own
        if bad:
            found[str(f.relative_to(ROOT))] = sorted(bad)
    assert found == {}


# What a module of algorithms/ may import besides the standard library, numpy, pyarrow
# and algorithms/ itself: the library whose algorithm it wraps, or the compiler of its
# fast path. Never pipeline/: a learner lifts any of them into a notebook.
WRAPS = {
    "jit.py": {"numba", "llvmlite"},               # the kernels' compiler
    "exact_dedup.py": {"xxhash"}, "exact_dedup_fast.py": {"xxhash"},   # 3.2's digest
    "ids.py": {"xxhash"},                          # the seeded id hash of 4.7 and 5.7
    "langid.py": {"fasttext"},                     # 2.2's language ID
    "quality_signals.py": {"datatrove", "spacy"},  # the rule packs' reference words
    "decontamination.py": {"datatrove"},           # its punctuation, as simplify_text's
    "packing_fast.py": {"regex"},                  # GPT-2's split pattern's classes
    "tokenizer_file.py": {"tokenizers", "tiktoken"}, "packing.py": {"tokenizers"},
    "bpe_trainer.py": {"tokenizers"}, "tokenizer_checks.py": {"tokenizers"},
}


def test_algorithms_import_nothing_of_pipeline_and_only_what_they_wrap():
    allowed = set(sys.stdlib_module_names) | {"numpy", "pyarrow", "algorithms", "__future__"}
    found = {}
    for f in sorted((ROOT / "algorithms").glob("*.py")):
        bad = imported_modules(f) - allowed - WRAPS.get(f.name, set())
        if bad:
            found[f.name] = sorted(bad)
    assert found == {}, found


def test_a_learner_runs_an_algorithm_on_a_list_of_strings(tmp_path):
    """In a fresh interpreter, as in a notebook: the tutorial's functions on plain strings,
    and nothing of pipeline/ is imported on the way."""
    code = (
        "import sys\n"
        "from algorithms.minhash import shingles, jaccard, near_duplicates, MinHasher\n"
        "from algorithms.exact_dedup import exact_dedup\n"
        "from algorithms.cleaning import dup_line_share, longest_char_run, alnum_share\n"
        "docs = ['the cat sat on the mat ' * 20, 'The  cat sat on the mat ' * 20,"
        " 'a completely different text about dogs ' * 20]\n"
        "assert list(exact_dedup(docs)) == [docs[0], docs[2]]\n"
        "mh = MinHasher(128)\n"
        "a, b = [int(x) for x in mh.a], [int(x) for x in mh.b]\n"
        "assert near_duplicates(docs, a, b, 16, 8, 0.8) == [0, 0, 2]\n"
        "assert jaccard(shingles('abcdef'), shingles('abcdeg')) == 1 / 3\n"
        "assert abs(dup_line_share('a\\na\\nb') - 1 / 3) < 1e-12 and longest_char_run('x' + '=' * 60) == 60\n"
        "assert alnum_share('机器学习') == 1.0\n"
        "assert not [m for m in sys.modules if m == 'pipeline' or m.startswith('pipeline.')]\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# each stage script, and the modules that hold the tutorial's algorithm it runs
STAGE_ALGORITHMS = {
    "download_data": ("pipeline.sources", "pipeline.hub"),   # section 1: fetch and re-shard
    "clean": ("algorithms",),
    "dedup_exact": ("algorithms",),
    "dedup_minhash": ("algorithms",),
    "train_tokenizer": ("algorithms",),
    "pack_parallel": ("algorithms",),
}


def code_lines_before_algorithm(path: Path, modules: tuple[str, ...]) -> int:
    """Lines of code (not blank, not a comment, not a docstring) after the module's
    docstring, up to and including the first line that calls a name imported from one
    of `modules` (in the file's order: what a reader meets first)."""
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith(modules):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module in ("pipeline", "algorithms") \
                and any(f"{node.module}.{a.name}".startswith(modules) for a in node.names):
            names |= {a.asname or a.name for a in node.names}
    calls = sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                   and isinstance(n.func, (ast.Name, ast.Attribute))
                   and _root_name(n.func) in names)
    assert calls, f"{path.name} calls nothing from {modules}"
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) \
                and isinstance(getattr(node.body[0], "value", None), ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            docstrings |= set(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    lines = src.splitlines()
    return sum(1 for i, line in enumerate(lines[:calls[0]], 1)
               if line.strip() and not line.strip().startswith("#") and i not in docstrings)


def _root_name(func) -> str | None:
    while isinstance(func, ast.Attribute):
        func = func.value
    return func.id if isinstance(func, ast.Name) else None


def test_each_stage_reaches_its_algorithm_in_its_first_80_lines_of_code():
    got = {s: code_lines_before_algorithm(ROOT / f"{s}.py", mods)
           for s, mods in STAGE_ALGORITHMS.items()}
    assert all(n <= 80 for n in got.values()), got


def test_the_readmes_map_of_the_tutorial_names_code_that_exists():
    """Every `file: name, name` of the README's map from the tutorial's code blocks to
    this code names a file and a top-level definition (or a method: Class.method) in it."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Reading the code beside the tutorial", 1)[1].split("\n## ", 1)[0]
    refs = re.findall(r"`([\w/]+\.py): ([^`]+)`", section)
    assert len(refs) >= 25
    for path, names in refs:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)}
        methods = {f"{c.name}.{m.name}" for c in tree.body if isinstance(c, ast.ClassDef)
                   for m in c.body if isinstance(m, ast.FunctionDef)}
        for name in re.split(r",\s*", re.sub(r"\(.*?\)", "", names)):
            name = name.strip()
            if name:
                assert name in defined | methods, f"{path}: {name}"


def test_numba_is_imported_without_scipy_and_scipy_still_imports_after():
    """algorithms/jit.py: numba's BLAS probe (scipy.linalg, 0.2 s a process, made when a
    process first loads a kernel) is skipped;
    scipy is not left broken for code that imports it later."""
    code = ("import sys\n"
            "import numpy as np\n"
            "import algorithms.cleaning_fast, algorithms.minhash_fast as m\n"
            "import algorithms.packing_fast as pf\n"
            # a kernel whose loading makes numba import numba.np.arraymath (the probe)
            "pf.merge_table(np.array([[1, 2]], np.int64))\n"
            "assert 'numba' in sys.modules\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] == 'scipy'))\n"
            "import scipy.linalg\n"
            "print(scipy.linalg.__name__)\n")
    # numba's own compiled kernels, not the ahead-of-time builds (which need no numba)
    cp = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT), "DATAPREP_AOT": "0"})
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["[]", "scipy.linalg"]


# run in a fresh interpreter: the value OPENBLAS_NUM_THREADS has when numpy is first
# imported (an audit hook sees the import), then the thread count OpenBLAS took, asked of
# the library numpy loaded (None if numpy's BLAS were not OpenBLAS)
_BLAS_PROBE = """
import ctypes, os, sys
seen = []
def hook(event, args):
    if event == "import" and args[0] == "numpy" and not seen:
        seen.append(os.environ.get("OPENBLAS_NUM_THREADS"))
sys.addaudithook(hook)
import importlib
importlib.import_module(sys.argv[1])
import numpy
threads = None
for line in open("/proc/self/maps"):
    if "openblas" in line and line.rstrip().endswith(".so"):
        lib = ctypes.CDLL(line.split()[-1])
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(lib, name):
                threads = getattr(lib, name)()
        break
print(seen[0] if seen else "no numpy", threads)
"""


def test_numpys_blas_starts_one_thread_in_every_script():
    """pipeline/__init__.py: every script imports `pipeline` before numpy, so that
    OpenBLAS starts one thread, not one per core, each spinning ~0.1 s of CPU at start-up
    (no stage does linear algebra); a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(ROOT)
    runs = {s: subprocess.Popen([sys.executable, "-c", _BLAS_PROBE, s], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for s in SCRIPTS}
    runs["user's value"] = subprocess.Popen(
        [sys.executable, "-c", _BLAS_PROBE, "dedup_exact"], cwd=ROOT,
        env={**env, "OPENBLAS_NUM_THREADS": "2"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    seen = {}
    for s, p in runs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, (s, err[-2000:])
        seen[s] = out.split()
    assert seen.pop("user's value")[0] == "2"
    assert {s: v[0] for s, v in seen.items()} == {s: "1" for s in SCRIPTS}
    # and OpenBLAS (numpy's wheels, as pinned, bundle it) took that one thread
    assert {s: v[1] for s, v in seen.items()} == {s: "1" for s in SCRIPTS}


def test_prefetch_compiles_for_rows_and_items_and_changes_nothing():
    """algorithms.jit.prefetch, a hint to the CPU: a kernel that prefetches rows of a
    2-D array and items of a 1-D one, out to the last one, computes what it would
    without (the merge loop of algorithms.bpe_trainer uses it)."""
    import numpy as np
    from algorithms.jit import njit, use_numba

    use_numba()                              # prefetch is numba's intrinsic from now on
    from algorithms.jit import prefetch

    @njit
    def total(rows, items, order, ahead):
        s = 0
        for e in range(len(order)):
            if e + ahead < len(order):
                prefetch(rows, order[e + ahead])
                prefetch(items, order[e + ahead])
            s += rows[order[e], 1] * items[order[e]]
        return s

    rng = np.random.default_rng(0)
    rows = rng.integers(0, 100, (10_000, 4)).astype(np.int32)
    items = rng.integers(0, 100, 10_000)
    order = rng.permutation(10_000)
    want = int((rows[:, 1].astype(np.int64) * items).sum())
    assert total(rows, items, order, 16) == total(rows, items, order, 10_000) == want

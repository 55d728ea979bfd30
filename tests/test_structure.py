"""The structure a learner and a maintainer rely on: stage scripts do not import each
other (their algorithms live in algorithms/, their machinery in pipeline/), and neither
do the tools, demos, benchmarks and scripts that use them."""

from __future__ import annotations

import ast
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
    users += sorted((ROOT / "pipeline").glob("*.py")) + sorted((ROOT / "algorithms").glob("*.py"))
    found = {}
    for f in users:
        bad = imported_modules(f) & set(SCRIPTS) - {f.stem}
        if bad:
            found[str(f.relative_to(ROOT))] = sorted(bad)
    assert found == {}


def test_algorithms_do_not_import_stage_machinery():
    """An algorithm module may use pipeline's small helpers (arrays, errors, shards), but
    not the stage machinery: it runs alone, in a test or a notebook."""
    machinery = {"pipeline.stage", "pipeline.staging", "pipeline.executors",
                 "pipeline.local_pool", "pipeline.lock", "pipeline.sweep"}
    for f in sorted((ROOT / "algorithms").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not mods & machinery, (f.name, mods & machinery)

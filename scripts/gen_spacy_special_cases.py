#!/usr/bin/env python3
"""Write algorithms/spacy_en_special_cases.json: spaCy's English tokenizer exceptions.

datatrove's Gopher, FineWeb and C4 filters count words with spaCy's blank English
tokenizer. algorithms/quality_signals.py reproduces that tokenizer in plain Python; its
only table too long to write out by hand is this one: the 1,347 strings spaCy splits
(or keeps whole) by rule ("don't" -> "do", "n't"; "e.g." stays one token; "cannot" ->
"can", "not"). This script copies it from the installed spaCy (MIT licence), so the
table is spaCy's own; tests/test_quality_signals.py checks it still equals spaCy's.

    python scripts/gen_spacy_special_cases.py
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "algorithms" / "spacy_en_special_cases.json"


def special_cases() -> dict[str, list[str]]:
    import spacy
    rules = spacy.blank("en").tokenizer.rules
    from spacy.symbols import ORTH
    return {k: [t[ORTH] for t in v] for k, v in sorted(rules.items())}


def main() -> int:
    import spacy
    cases = special_cases()
    source = json.dumps(f"spaCy {spacy.__version__} English tokenizer exceptions (MIT licence)")
    rows = [f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
            for k, v in cases.items()]
    OUT.write_text('{"source": ' + source + ',\n"cases": {\n' + ",\n".join(rows) + "\n}}\n",
                   encoding="utf-8")
    print(f"wrote {len(cases)} special cases to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Write algorithms/spacy_en_special_cases.json: spaCy's English tokenizer exceptions,
and its letter classes.

datatrove's Gopher, FineWeb and C4 filters count words with spaCy's blank English
tokenizer. algorithms/words.py reproduces that tokenizer in plain Python (and
algorithms/words_fast.py compiled); its only table too long to write out by hand is this
one: the 1,347 strings spaCy splits (or keeps whole) by rule ("don't" -> "do", "n't";
"e.g." stays one token; "cannot" -> "can", "not"). This script copies it from the
installed spaCy (MIT licence), so the table is spaCy's own; tests/test_words.py checks it
still equals spaCy's. It also writes spaCy's ALPHA, ALPHA_LOWER and ALPHA_UPPER character
classes (which its infix and suffix rules use, and which differ from str.isalpha on some
30,000 code points, e.g. the Greek lunate epsilon) and its icons (LIST_ICONS, which its
prefix, suffix and infix rules use: not every symbol Python's Unicode calls So, e.g. not
the emoji U+1F972) as code point ranges.

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


def letter_ranges() -> dict[str, list[list[int]]]:
    import re

    from spacy.lang.char_classes import ALPHA, ALPHA_LOWER, ALPHA_UPPER, LIST_ICONS
    out = {}
    classes = [(f"[{ALPHA}]", "alpha"), (f"[{ALPHA_LOWER}]", "alpha_lower"),
               (f"[{ALPHA_UPPER}]", "alpha_upper"), ("|".join(LIST_ICONS), "icon")]
    for cls, name in classes:
        r = re.compile(cls)
        ranges, start = [], None
        for i in range(0x110001):
            inside = i < 0x110000 and r.match(chr(i)) is not None
            if inside and start is None:
                start = i
            elif not inside and start is not None:
                ranges.append([start, i - 1])
                start = None
        out[name] = ranges
    return out


def main() -> int:
    sys.path.insert(0, str(OUT.parent.parent))
    from pipeline.requirements import require

    require("scripts/gen_spacy_special_cases.py", "requirements-bench.txt", ["spacy"])
    import spacy
    cases = special_cases()
    source = json.dumps(f"spaCy {spacy.__version__} English tokenizer exceptions (MIT licence)")
    rows = [f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
            for k, v in cases.items()]
    letters = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in letter_ranges().items())
    OUT.write_text('{"source": ' + source + ',\n' + letters + ',\n"cases": {\n'
                   + ",\n".join(rows) + "\n}}\n", encoding="utf-8")
    print(f"wrote {len(cases)} special cases to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

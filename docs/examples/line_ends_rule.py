"""A rule of your own: too few lines end like a sentence (Chinese punctuation counts)."""
import numpy as np

from algorithms.rules import Rule

ENDS = tuple(".!?\"')]。！？…」』”’")


def line_end_share(texts):
    """Per document, the share of its non-blank lines that end in ENDS."""
    out = []
    for text in texts.to_pylist():
        lines = [line.rstrip() for line in (text or "").split("\n") if line.strip()]
        out.append(sum(line.endswith(ENDS) for line in lines) / len(lines) if lines else 0.0)
    return np.array(out)


RULES = [Rule("few_sentence_ends", "under this share of lines end like a sentence",
              "line_end_share", line_end_share, 0.2, "below", "--min-line-ends",
              bins=tuple(np.linspace(0, 1, 21)))]

"""The one tokenizer loader, shared by every stage and demo that touches token ids."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import StageError

EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = [EOS_TOKEN, "<|im_start|>", "<|im_end|>"] + [f"<|reserved_{i}|>" for i in range(8)]


def load_tokenizer(path: str | os.PathLike):
    """Load a tokenizers.Tokenizer from tokenizer.json, with a one-line error if unusable."""
    from tokenizers import Tokenizer

    p = Path(path)
    if not p.exists():
        raise StageError(f"{p} not found; run train_tokenizer.py first")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise StageError(f"{p}: not a valid tokenizer.json ({str(e).splitlines()[0]})") from None

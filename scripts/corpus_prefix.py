#!/usr/bin/env python3
"""Copy the first MB of text of a folder of parquet shards (the benchmark corpus, say)
into another folder, for download_data.py --input: the inputs the docs' 256 MB runs use.

    python scripts/corpus_prefix.py data/bench_corpus 256 bench_256mb
    python download_data.py --input bench_256mb
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from scale import corpus_prefix  # noqa: E402  (the same prefix bench-scale runs on)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    corpus, mb, out = Path(argv[0]), argv[1], Path(argv[2])
    try:
        size = float(mb)
    except ValueError:
        size = -1.0
    if not size > 0 or not corpus.is_dir():
        print(f"error: need a folder of parquet shards and a positive size in MB "
              f"(got {argv[0]!r}, {mb!r})", file=sys.stderr)
        return 2
    got = corpus_prefix(corpus, size / 1000, out)
    print(f"wrote {got / 1e6:.1f} MB of text to {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

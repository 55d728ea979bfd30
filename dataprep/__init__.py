"""Plumbing shared by every stage: the data layout, parquet shards, manifests,
atomic output, stats tables and executor selection.

The stage logic itself lives in the top-level scripts (clean.py, dedup_exact.py, ...);
this package only holds what every stage needs in the same way.
"""

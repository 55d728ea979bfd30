"""The machinery every stage shares, written once: the data layout, parquet shards and
work units, manifests, staging and atomic commit, kept per-document measurements,
executors, progress and text tables.

No algorithm of the tutorial lives here: those are in the `algorithms` package, one
module per tutorial section, and the stage scripts at the top level call them in the
tutorial's order.
"""

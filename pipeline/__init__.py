"""The machinery every stage shares, written once: the data layout, parquet shards and
work units, manifests, staging and atomic commit, kept per-document measurements,
executors, progress and text tables.

No algorithm of the tutorial lives here: those are in the `algorithms` package, one
module per tutorial section, and the stage scripts at the top level call them in the
tutorial's order.
"""

import os

# Every stage imports this package before numpy (the first import of each stage script),
# so that numpy's BLAS, OpenBLAS, starts with one thread instead of one per core. No stage
# does linear algebra; but each thread OpenBLAS starts when numpy is imported spins for
# about 0.1 s waiting for work before it sleeps: 0.1 CPU s of every stage's run on 2 cores
# (measured), and up to one such thread per core on a larger machine. A value the user set
# is kept; processes the stage starts inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

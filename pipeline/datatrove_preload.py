"""Imported first by a stage's fork server (pipeline.local_pool: _preload_in_forkserver),
before datatrove's executor: datatrove.io without the hub's client (pipeline.datatrove_import)."""
from .datatrove_import import import_datatrove_io

import_datatrove_io()

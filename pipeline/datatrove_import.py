"""datatrove's executors, imported without the Hugging Face hub's client.

`datatrove.io`, which every datatrove executor imports, starts with
`from huggingface_hub import HfFileSystem, cached_assets_path`. Those two names load the
hub's file system, its API and its HTTP client: 0.13-0.15 CPU s of a stage's start-up
(the import of datatrove's local executor goes from 0.23 to 0.10 s), paid by every
stage, though only download_data.py reaches the hub, through huggingface_hub itself.

datatrove.io uses the two names for an hf:// folder only: `isinstance(fs, HfFileSystem)`
and `cached_assets_path(...)` to download a filter's assets. So, while datatrove.io is
first imported, huggingface_hub offers stand-ins under those names:

- `HfFileSystem`: `isinstance(x, HfFileSystem)` is false while the hub's file system has
  never been imported (no instance of it can exist then), and the real test after;
- `cached_assets_path`: imports the real function and calls it.

Right after, huggingface_hub's own names are put back: any later import, by datatrove
or anyone, gets the real ones. Where datatrove.io or the hub's file system is already
imported, nothing is done.
"""

from __future__ import annotations

import sys

_HUB_FS = "huggingface_hub.hf_file_system"


class _HubFileSystemType(type):
    def __instancecheck__(cls, obj) -> bool:
        real = sys.modules.get(_HUB_FS)
        return real is not None and isinstance(obj, real.HfFileSystem)

    def __subclasscheck__(cls, sub) -> bool:
        real = sys.modules.get(_HUB_FS)
        return real is not None and issubclass(sub, real.HfFileSystem)


class HfFileSystem(metaclass=_HubFileSystemType):
    """Stands for huggingface_hub.HfFileSystem in datatrove.io's isinstance test."""

    def __new__(cls, *args, **kwargs):
        from huggingface_hub import HfFileSystem as real

        return real(*args, **kwargs)


def cached_assets_path(*args, **kwargs):
    """huggingface_hub.cached_assets_path, imported when first called."""
    from huggingface_hub import cached_assets_path as real

    return real(*args, **kwargs)


def import_datatrove_io() -> None:
    """Import datatrove.io with the two stand-ins (see the module's docstring)."""
    if "datatrove.io" in sys.modules or _HUB_FS in sys.modules:
        return
    import huggingface_hub

    hub = vars(huggingface_hub)
    names = {"HfFileSystem": HfFileSystem, "cached_assets_path": cached_assets_path}
    saved = {n: hub[n] for n in names if n in hub}
    hub.update(names)
    try:
        import datatrove.io  # noqa: F401
    finally:
        for n in names:
            if n in saved:
                hub[n] = saved[n]
            else:
                hub.pop(n, None)

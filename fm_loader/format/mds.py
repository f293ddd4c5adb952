"""mosaicml-streaming's MDS format modules, imported without the package's start-up.

`import streaming` runs `streaming/__init__.py` and `streaming/base/__init__.py`, which import its
datasets for text, vision and video: transformers, torchvision and a dataloader, 5-7 s of a
command that only writes or reads MDS shards (`fm shards build`, `fm verify`). The format
modules (`streaming.base.format...`, `streaming.base.storage...`) need none of it.

`defer_streaming_packages()` puts the two packages in `sys.modules` with their `__init__` not yet
run: importing a submodule then loads that submodule and what it imports, and the first access of
a name the package itself defines (`streaming.StreamingDataset`, `from streaming import
MDSWriter`) runs the real `__init__` in place. Code that wants the whole library gets it, later.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

# The packages whose __init__ imports the heavy datasets; parents first.
DEFERRED_PACKAGES = ("streaming", "streaming.base")
_LOCK = threading.RLock()


class _DeferredPackage(types.ModuleType):
    """A package module whose `__init__` runs on the first lookup of a name it lacks."""

    def __getattr__(self, name: str) -> Any:
        # Any name, dunders included (`__version__`, `__all__`): what the real package defines
        # must be found. The module's own attributes (`__path__`, `__spec__`) never come here.
        with _LOCK:
            if type(self) is _DeferredPackage:
                # A plain module from here on: a name the real __init__ does not define raises
                # AttributeError as usual instead of coming back here.
                self.__class__ = types.ModuleType  # type: ignore[assignment]
                spec = self.__spec__
                if spec is None or spec.loader is None:
                    raise ImportError(f"{self.__name__} has no loader to run its __init__ with")
                spec.loader.exec_module(self)
        return getattr(self, name)


def defer_streaming_packages() -> None:
    """Make `streaming.base.format...` importable without running the packages' `__init__`
    (a no-op when `streaming` is imported already, or when this was done before)."""
    with _LOCK:
        for name in DEFERRED_PACKAGES:
            if name in sys.modules:
                continue
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                raise ImportError(
                    f"{name} is not an importable package: reinstall mosaicml-streaming"
                )
            module = importlib.util.module_from_spec(spec)
            module.__class__ = _DeferredPackage
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)

"""The built-in circuit-discovery methods, one file each; every module here registers itself
(`mechsynth.circuits.method`). Yours go in a file of your own, named in MECHSYNTH_PLUGINS."""

from __future__ import annotations

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

"""Loading a script of hack/ in a test: the scripts are run by path, not installed as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HACK = Path(__file__).resolve().parents[3] / "hack"


def load_script(name: str, folder: str = "") -> ModuleType:
    """hack/[<folder>/]<name>.py as module `name` (registered in sys.modules, so its
    dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(name, HACK / folder / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

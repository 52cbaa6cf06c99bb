"""Generic controller machinery, with no JobSet knowledge.

Nothing here imports ``jobset_controller.api``, ``reconcile`` or ``controller``; the dependency
direction is an import-linter contract in ``pyproject.toml``.

Two modules every other one leans on: ``resources`` (where a kind lives in the API; every path
is built from it) and ``clock`` (the one Clock and RandomSource each piece takes, real by
default, so every wait and jitter can be stepped in tests).
"""

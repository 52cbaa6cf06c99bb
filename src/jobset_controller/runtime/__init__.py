"""Generic controller machinery, with no JobSet knowledge.

Nothing here imports ``jobset_controller.api``, ``reconcile`` or ``controller``; the dependency
direction is an import-linter contract in ``pyproject.toml``.
"""

"""Generic controller machinery, with no JobSet knowledge.

Nothing here imports ``jobset_controller.api``, ``reconcile`` or ``controller``; the dependency
direction is checked by ``tests/unit/tooling/test_import_direction.py``.
"""

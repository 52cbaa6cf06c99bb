"""A package, so that its package-scoped fixtures end with its last test (tests/conftest.py)."""

"""What the controller loads before /readyz, and what it loads once ready.

The API models (and pydantic), the pure reconcile and JobSet admission are most of the import
time of a start, and the path from process start to /readyz needs none of them (the informers
cache raw dicts, the servers route by path). They are loaded by the manager's warm-up once the
process is ready, or by the first pass or review if that comes first. Checked in a fresh
interpreter: this test process has long imported everything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import jobset_controller.api
import jobset_controller.reconcile

LOADED_AFTER_READY = (
    "pydantic",
    "jobset_controller.api.types",
    "jobset_controller.api.validation",
    "jobset_controller.reconcile.steps",
    "jobset_controller.webhook.admission",
)


def _loaded(code: str) -> list[str]:
    probe = (
        f"{code}\nimport sys\n"
        f"print(' '.join(m for m in {LOADED_AFTER_READY!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return result.stdout.split()


def test_the_run_command_and_the_manager_load_no_model_reconcile_or_admission() -> None:
    code = (
        "import jobset_controller.cli, jobset_controller.manager\n"
        "from jobset_controller.config import load_configuration\n"
        "load_configuration(None)"
    )
    assert _loaded(code) == []


def test_the_warm_up_loads_them_all() -> None:
    code = (
        "import asyncio\n"
        "from jobset_controller.manager.preload import warm_up\n"
        "asyncio.run(warm_up())"
    )
    assert _loaded(code) == list(LOADED_AFTER_READY)


@pytest.mark.parametrize("package", [jobset_controller.api, jobset_controller.reconcile])
def test_every_exported_name_resolves(package: object) -> None:
    for name in package.__all__:  # type: ignore[attr-defined]
        assert getattr(package, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        jobset_controller.api.Nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        jobset_controller.reconcile.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_the_package_reconcile_is_the_function() -> None:
    from jobset_controller.reconcile import reconcile

    assert callable(reconcile)
    assert reconcile.__module__ == "jobset_controller.reconcile.steps"

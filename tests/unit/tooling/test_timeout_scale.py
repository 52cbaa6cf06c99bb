"""JOBSET_TEST_TIMEOUT_SCALE: what it accepts, and that the shared waits scale by it and say what
they last saw when they give up.

Why here: the knob is what makes the cluster tiers usable on a slow machine, and a wait that fails
there must be understood from its message alone. Every test here waits for tens of milliseconds
at most; the scale is checked through the bound the failure message reports, never by waiting
for a long bound to pass.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller_dev.envtest.polling import (
    SCALE_VARIABLE,
    eventually,
    scaled,
    timeout_scale,
)
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port, wait_healthy


def test_the_scale_is_1_when_the_variable_is_unset_or_blank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SCALE_VARIABLE, raising=False)
    assert timeout_scale() == 1.0
    assert scaled(30) == 30
    monkeypatch.setenv(SCALE_VARIABLE, "  ")
    assert timeout_scale() == 1.0


@pytest.mark.parametrize(("text", "factor"), [("2", 2.0), ("2.5", 2.5), (" 0.5 ", 0.5)])
def test_a_positive_number_multiplies_every_wait(
    monkeypatch: pytest.MonkeyPatch, text: str, factor: float
) -> None:
    monkeypatch.setenv(SCALE_VARIABLE, text)
    assert timeout_scale() == factor
    assert scaled(4) == 4 * factor


@pytest.mark.parametrize("text", ["0", "-1", "inf", "-inf", "nan", "slow", "2x"])
def test_zero_negative_infinite_nan_and_text_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv(SCALE_VARIABLE, text)
    with pytest.raises(ValueError, match=SCALE_VARIABLE) as refused:
        timeout_scale()
    assert repr(text) in str(refused.value)
    with pytest.raises(ValueError, match=SCALE_VARIABLE):
        scaled(1)


async def test_eventually_gives_up_after_within_times_the_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SCALE_VARIABLE, "4")
    with pytest.raises(AssertionError, match=r"^the flag: not reached within 0\.04 s$"):
        await eventually(lambda: False, "the flag", 0.01, interval=0.001)


async def test_eventually_waits_past_within_when_the_scale_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unscaled, a wait gives up after `within` (0.02 s); scaled by 1000, a condition that
    holds after 0.3 s is waited for. (Neither part depends on how soon this process runs: a
    condition that held after 0.3 s in the first part failed it once, when a loaded machine
    kept the test off the CPU for longer than that.)"""
    monkeypatch.setenv(SCALE_VARIABLE, "1")
    with pytest.raises(AssertionError, match=r"not reached within 0\.02 s"):
        await eventually(lambda: False, "never", 0.02, interval=0.005)
    started = time.monotonic()

    def later() -> bool:
        return time.monotonic() - started > 0.3

    monkeypatch.setenv(SCALE_VARIABLE, "1000")
    await eventually(later, "later", 0.02, interval=0.005)
    # Read here, not from what `eventually` reports: its clock starts a little after `started`,
    # so it once reported 0.2999965 s for a condition that held after 0.3 s.
    assert time.monotonic() - started > 0.3


async def test_eventually_names_what_it_waited_on_its_last_result_and_the_state() -> None:
    def check() -> bool:
        # A falsy result other than False (an empty list of what is not there yet) is shown.
        return cast(bool, [])

    with pytest.raises(AssertionError) as late:
        await eventually(
            check, "three replicas", 0.01, interval=0.001, state=lambda: "replicas: 1 of 3"
        )
    assert str(late.value) == (
        "three replicas: not reached within 0.01 s (last result: []; state: replicas: 1 of 3)"
    )


async def test_eventually_reports_the_last_tolerated_error_and_an_async_state() -> None:
    def check() -> bool:
        raise ConnectionResetError("peer reset")

    async def state() -> str:
        await asyncio.sleep(0)
        return "apiserver restarting"

    with pytest.raises(AssertionError) as late:
        await eventually(check, "the list", 0.01, interval=0.001, tolerate=(OSError,), state=state)
    assert str(late.value) == (
        "the list: not reached within 0.01 s (last error: ConnectionResetError: peer reset; "
        "state: apiserver restarting)"
    )


async def test_eventually_still_fails_on_its_own_terms_when_the_state_cannot_be_had() -> None:
    def state() -> str:
        raise KeyError("status")

    with pytest.raises(AssertionError) as late:
        await eventually(lambda: False, "the status", 0.01, interval=0.001, state=state)
    assert str(late.value) == (
        "the status: not reached within 0.01 s (state unavailable: KeyError: 'status')"
    )


def test_wait_healthy_scales_its_bound_and_says_what_it_last_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing listens on the port: the probe gets no answer, and `late` is told so, with the
    scaled bound."""
    monkeypatch.setenv(SCALE_VARIABLE, "3")
    port = free_port()
    with pytest.raises(TimeoutError) as late:
        wait_healthy(
            port,
            running=lambda: True,
            exited=lambda: AssertionError("exited"),
            late=TimeoutError,
            within=0.01,
            interval=0.001,
        )
    assert str(late.value) == f"/readyz on port {port} not 200 within 0.03 s (no answer)"


def test_the_control_planes_wait_scales_its_bound_and_reports_the_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`ControlPlane._wait` (every component, node and ServiceAccount wait of the harness)."""
    monkeypatch.setenv(SCALE_VARIABLE, "2")
    plane = ControlPlane(workdir=tmp_path, ready_timeout=0.02)
    sleeper = ManagedProcess(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "log"
    )
    sleeper.start()
    try:
        with pytest.raises(ControlPlaneError) as late:
            plane._wait(sleeper, lambda: False, "the socket", state=lambda: "no socket file")
    finally:
        sleeper.stop()
    assert str(late.value) == "the socket not ready within 0.04 s (no socket file):\n"

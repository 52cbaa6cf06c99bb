"""StopSignals (runtime/interrupts.py) with real signals sent to this process, one test per
guarantee. The handlers the tests install are put back after each (pytest's own Ctrl-C)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import NoReturn

import pytest

from jobset_controller.runtime.interrupts import StopSignals, by_signal


@pytest.fixture(autouse=True)
def handlers_restored() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def send(signum: int) -> None:
    """Deliver `signum` to this process; its Python handler has run when this returns."""
    os.kill(os.getpid(), signum)
    signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary after the kill


def test_a_signal_ignored_at_exec_is_taken_once_installed() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stops = StopSignals().install()
    send(signal.SIGINT)
    assert stops.received == signal.SIGINT


def test_a_signal_before_the_command_says_what_it_means_is_kept_then_ends_it_with_the_code() -> (
    None
):
    stops = StopSignals().install()
    send(signal.SIGTERM)
    assert stops.received == signal.SIGTERM
    with pytest.raises(SystemExit) as ended:
        stops.exit_with(0)
    assert ended.value.code == 0


class Ended(Exception):
    """What the tests' `end` raises in place of ending the pytest process."""


def ended_with(code: int) -> NoReturn:
    raise Ended(code)


def test_once_the_code_is_known_a_signal_before_the_loop_ends_the_command_at_once() -> None:
    stops = StopSignals(end=ended_with).install()
    stops.exit_with(by_signal)
    with pytest.raises(Ended) as ended:
        send(signal.SIGINT)
    assert ended.value.args == (130,)


def test_the_end_before_the_loop_exits_the_process_with_the_code_and_keeps_what_it_printed() -> (
    None
):
    # In a process of its own: the real end is os._exit, which no exception handler or finally
    # block sees (an exception raised by a signal handler inside an extension module's
    # initialisation crashed the interpreter). Output written before the signal is flushed;
    # nothing after it runs.
    program = textwrap.dedent("""
        import os, signal
        from jobset_controller.runtime.interrupts import StopSignals, by_signal
        stops = StopSignals().install()
        stops.exit_with(by_signal)
        print("before", flush=False)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])
        finally:
            print("finally ran")
        print("after")
    """)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (143, "before\n", "")


def test_the_first_signal_is_the_one_kept() -> None:
    stops = StopSignals().install()
    send(signal.SIGTERM)
    send(signal.SIGINT)
    assert stops.received == signal.SIGTERM


def test_after_attach_signals_go_to_the_loop_not_to_system_exit() -> None:
    stops = StopSignals().install()
    stops.exit_with(1)
    seen: list[int] = []

    async def main() -> None:
        stopped = asyncio.Event()

        def on_stop(signum: int) -> None:
            seen.append(signum)
            stopped.set()

        stops.attach(on_stop)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), 5)

    asyncio.run(main())
    assert seen == [signal.SIGTERM]


def test_a_signal_received_before_attach_is_handed_to_the_loop_once_it_runs() -> None:
    stops = StopSignals().install()
    send(signal.SIGINT)
    seen: list[int] = []

    async def main() -> None:
        stops.attach(seen.append)
        await asyncio.sleep(
            0
        )  # the loop's next turn, where a signal received earlier is handed over

    asyncio.run(main())
    assert seen == [signal.SIGINT]


def test_run_cancels_main_on_a_signal_and_returns_the_commands_code() -> None:
    stops = StopSignals().install()
    stops.exit_with(0)
    cancelled: list[bool] = []

    async def main() -> int:
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 5

    assert stops.run(main) == 0
    assert cancelled == [True]


def test_run_without_a_code_returns_128_plus_the_signal() -> None:
    stops = StopSignals().install()

    async def main() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(30)
        return 5

    assert stops.run(main) == 143


def test_run_returns_mains_own_result_when_no_signal_came() -> None:
    async def main() -> int:
        return 7

    assert StopSignals().install().run(main) == 7


def test_after_run_a_late_signal_is_only_recorded() -> None:
    stops = StopSignals().install()
    stops.exit_with(0)

    async def main() -> int:
        return 0

    stops.run(main)
    send(signal.SIGINT)  # no SystemExit, no KeyboardInterrupt
    assert stops.received == signal.SIGINT

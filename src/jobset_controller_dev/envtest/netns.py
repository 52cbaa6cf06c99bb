"""A private network + mount namespace for the real-node tier, and a way for this process into it.

Why: a real node needs addresses pods can reach (not 127.0.0.1), a bridge, iptables rules,
tmpfs over paths the kubelet and containerd hard-code, and masks over host-wide sysctls the
kubelet would otherwise "fix". All of that happens inside namespaces this harness creates, so no
packet leaves them and no host setting changes.

- `NetNamespace.start()` runs a holder (`unshare --net --mount --propagation private sleep
  infinity`); the namespaces live as long as it does. `wrap(argv)` prefixes a command with
  `nsenter` into both, `run(argv)` runs one there.
- `entered()` moves the CALLING THREAD's network namespace into it (setns) and back on exit.
  Sockets and child processes created meanwhile belong to the private network; sockets made
  before keep theirs. The real-node tests use it around the whole tier, on the main thread, so
  the control plane they start (as ordinary child processes) is in the private network too, and
  the test reaches it on the namespace's own 127.0.0.1.
- `stop()` kills the holder; with every process inside gone, the namespaces and every mount made
  in them disappear.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import parent_death_signal

_CLONE_NEWNET = 0x40000000


class NamespaceError(RuntimeError):
    """A namespace could not be made or entered; the message says what failed."""


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(f"setns(CLONE_NEWNET) failed: {os.strerror(errno)}")


class NetNamespace:
    """One private network + mount namespace pair, held by a sleeping process."""

    def __init__(self) -> None:
        self._holder: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._holder is None:
            raise NamespaceError("the namespace is not started")
        return self._holder.pid

    @property
    def net_path(self) -> Path:
        return Path(f"/proc/{self.pid}/ns/net")

    def start(self) -> NetNamespace:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            preexec_fn=parent_death_signal(),
        )
        ours = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + scaled(10)
        while time.monotonic() < deadline:
            try:
                if os.readlink(self.net_path) != ours:
                    return self
            except OSError:
                pass
            if self._holder.poll() is not None:
                raise NamespaceError(f"unshare exited with {self._holder.returncode}")
            time.sleep(0.02)
        raise NamespaceError(
            f"the namespace holder did not unshare within {scaled(10):g} s "
            f"({self.net_path} is still this process's network namespace)"
        )

    def wrap(self, argv: Sequence[str], *, mount: bool = True) -> list[str]:
        """`argv` run inside the network (and, by default, the mount) namespace."""
        spaces = ["--net", "--mount"] if mount else ["--net"]
        return ["nsenter", "-t", str(self.pid), *spaces, "--", *argv]

    def run(self, *argv: str, check: bool = True, mount: bool = True) -> str:
        result = subprocess.run(
            self.wrap(argv, mount=mount),
            capture_output=True,
            text=True,
            check=False,
            timeout=scaled(60),
        )
        if check and result.returncode != 0:
            raise NamespaceError(f"{' '.join(argv)}: {result.stderr.strip()}")
        return result.stdout

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This thread in the namespace's network until the block ends (module docstring)."""
        mine = f"/proc/self/task/{threading.get_native_id()}/ns/net"
        with open(mine) as home, open(self.net_path) as there:
            _setns(there.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def stop(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()

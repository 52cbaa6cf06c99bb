"""conn_bench.py's server process: our real webhook server and health server, nothing else.

Why a process of its own: its RSS is what the bench reads (/proc/<pid>/statm), so nothing of the
bench (its clients, its Go build) may share it. It is what `jobset-controller run` starts for the
webhook port (`webhook.server.WebhookServer` with a context from `runtime.servingtls`) and the
health port (`runtime.metrics_and_health.HealthServer`, plain HTTP), without the controller's
informers around them, so the figures are the connections' and not the caches'. The source tree
comes from PYTHONPATH, so an earlier commit's tree can be measured the same way.

    python conn_server.py CERT_DIR    # prints one line, "ready <webhook port> <health port>"
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path


async def main(cert_dir: Path) -> None:
    from jobset_controller.api import FeatureGates
    from jobset_controller.runtime.logging import configure_logging
    from jobset_controller.runtime.metrics_and_health import HealthServer
    from jobset_controller.runtime.servingtls import pair_context
    from jobset_controller.webhook.server import WebhookServer

    configure_logging("info", "json")
    try:  # as `jobset-controller run` does at start (trees before issue 24 lack it)
        from jobset_controller.runtime.rlimit import raise_open_files_limit

        raise_open_files_limit()
    except ImportError:
        pass
    webhook = WebhookServer(
        lookup_claim=None,
        features=FeatureGates(),
        ssl_context=pair_context(cert_dir),
        host="127.0.0.1",
        port=0,
    )
    health = HealthServer("127.0.0.1:0")
    health.add_readiness_check("webhook", lambda: webhook.listening)
    await webhook.start()
    await health.start()
    # The admission handler's first call imports the API models (the manager's warm-up does
    # it once the process is ready): done here too, before the bench reads a baseline.
    from jobset_controller.webhook import admission  # noqa: F401

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready {webhook.port} {health.port}", flush=True)
    await stop.wait()
    await webhook.stop()
    await health.stop()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

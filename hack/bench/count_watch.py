"""A watch that reports when it has seen `count` objects (benchlib.CountWatch runs it).

Prints `ready` once the list is done and the watch answered, then `seen <perf_counter>` the
moment the collection holds `count` objects, and exits (1, with a traceback on stderr, if the
watch fails first). Its own process, so the client being measured never gives it a turn of its
event loop.

Run: python count_watch.py SERVER CA CERT KEY PATH COUNT
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import RawClient, Watcher


async def main(server: str, ca: str, cert: str, key: str, path: str, count: int) -> None:
    client = RawClient.for_files(server, Path(ca), Path(cert), Path(key))
    done = asyncio.Event()
    watcher: Watcher

    def on_event(kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if not done.is_set() and len(watcher.objects) >= count:
            print(f"seen {time.perf_counter()!r}", flush=True)
            done.set()

    watcher = Watcher(client, path, on_event=on_event)
    try:
        await watcher.start()
        print("ready", flush=True)
        await watcher.until(done)  # a failed watch raises: exit 1 at once, not at the timeout
    finally:
        await watcher.stop()
        await client.close()


if __name__ == "__main__":
    server, ca, cert, key, path, count = sys.argv[1:]
    asyncio.run(main(server, ca, cert, key, path, int(count)))

"""The warm-up: what the first pass and the first admission need, loaded once the process is ready.

Belongs here: the list of modules kept off the path to /readyz and the step that loads them. The
API models (and pydantic), reconcile and JobSet admission are imported on first use
(api/__init__.py), so without this the first pass or review would pay for them (~0.1 s of CPU on
the 2-core development machine). It runs as an OTHERS runnable, after the caches listed.
"""

from __future__ import annotations

import asyncio
import gc
import importlib

import structlog

log = structlog.get_logger("manager")

# In order, one module per step; pydantic, the largest, is split in two.
WARM_UP_MODULES = (
    "pydantic_core",
    "pydantic.main",
    "jobset_controller.api.types",
    "jobset_controller.api.validation",
    "jobset_controller.reconcile.steps",
    "jobset_controller.webhook.admission",
)


async def warm_up() -> None:
    """Load the modules above, then build the models' validators (api/warmup.py). Each step
    runs in a loop turn of its own (tens of ms), with a 1 ms pause between them: a probe, a
    pass or a review that arrives meanwhile waits for one step, not for all of them. A failure
    only costs the first call the time it would have taken anyway."""
    try:
        for module in WARM_UP_MODULES:
            await asyncio.sleep(0.001)  # a loop turn for whatever waits, not synchronisation
            importlib.import_module(module)
        await asyncio.sleep(0.001)
        from jobset_controller.api.warmup import warm_up as build_validators

        build_validators()
    except Exception as error:
        log.warning("model warm-up failed", error=str(error))
    # The modules and models loaded here live as long as the process: keep them out of the
    # collector's full scans, as the caches' first lists are.
    gc.freeze()

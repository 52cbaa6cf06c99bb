"""What the controller's unit tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobset_controller.api import FeatureGates
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.reconcile import Plan


def offline_controller(executor: object, **options: Any) -> JobSetController:
    """A JobSetController with no API client: its informers are never started, the test fills
    their stores; `executor` records or fakes what a pass would write."""
    return JobSetController(
        object(),  # type: ignore[arg-type]  # informers are not started here
        enqueue=lambda key: None,
        executor=executor,  # type: ignore[arg-type]
        recorder=object(),  # type: ignore[arg-type]
        features=FeatureGates(),
        **options,
    )


class PlanRecorder:
    """An executor that records each Plan a pass hands it and writes nothing."""

    def __init__(self) -> None:
        self.plans: list[Plan] = []

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None] = lambda name: None
    ) -> str | None:
        self.plans.append(plan)
        return None

"""The soak reads the leader's work-queue depth from its /metrics text; an answer cut short (a
replica that exits while it is scraped) is no reading, not an error of the sampler."""

from __future__ import annotations

import asyncio

from jobset_controller_dev.soak.run import burst_worked_off, depth_in

METRICS = (
    "# HELP workqueue_depth Current depth of workqueue\n"
    "# TYPE workqueue_depth gauge\n"
    'workqueue_depth{controller="pod",name="pod"} 3\n'
    'workqueue_depth{controller="jobset",name="jobset"} 12\n'
)


def test_the_depth_is_the_jobset_queues_value() -> None:
    assert depth_in(METRICS) == 12.0


PRIORITY_QUEUE = (
    'workqueue_depth{controller="jobset",name="jobset",priority="-100"} 0\n'
    'workqueue_depth{controller="jobset",name="jobset",priority="0"} 480\n'
    'workqueue_depth{controller="pod",name="pod",priority="0"} 7\n'
)


def test_a_priority_queues_depth_is_the_sum_of_its_priorities() -> None:
    """Upstream's controller-runtime publishes a series per priority; a burst's keys are at
    priority 0, after the relist's -100 in the text."""
    assert depth_in(PRIORITY_QUEUE) == 480.0


def test_a_cut_series_of_a_priority_queue_is_no_reading() -> None:
    cut = PRIORITY_QUEUE[: PRIORITY_QUEUE.index('priority="0"} ') + len('priority="0"}')]
    assert depth_in(cut) is None


def test_an_answer_cut_before_the_value_is_no_reading() -> None:
    cut = METRICS[: METRICS.rindex("} ") + 1]
    assert cut.endswith('name="jobset"}')
    assert depth_in(cut) is None


def test_an_answer_without_the_jobset_queue_is_no_reading() -> None:
    assert depth_in(METRICS.splitlines()[2]) is None
    assert depth_in("") is None


async def test_a_burst_is_worked_off_only_at_an_empty_queue_after_its_creates_returned() -> None:
    loop = asyncio.get_running_loop()
    sent, sending = loop.create_future(), loop.create_future()
    sent.set_result(None)
    assert not burst_worked_off(0.0, [sent, sending])  # read before the last JobSet existed
    sending.set_result(None)
    assert burst_worked_off(0.0, [sent, sending])
    assert not burst_worked_off(3.0, [sent, sending])
    assert not burst_worked_off(None, [sent, sending])  # no reading

"""Random sequences of add, add_after, get, done, time passing and shutdown, checked step by step
against a plain reference model, with the queue's invariants asserted after every step."""

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.workqueue import QueueShutDown, WorkQueue

KEYS = ["a", "b", "c"]


@dataclass
class Model:
    """What the queue should do, written as directly as possible."""

    now: float = 0.0
    queue: list[str] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)
    processing: set[str] = field(default_factory=set)
    delayed: dict[str, tuple[float, int]] = field(default_factory=dict)  # key -> (ready_at, call)
    calls: int = 0
    shut_down: bool = False

    def add(self, key: str) -> None:
        if self.shut_down or key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.queue.append(key)

    def add_after(self, key: str, delay: float) -> None:
        if self.shut_down:
            return
        if delay <= 0:
            self.add(key)
            return
        self.calls += 1
        ready_at = self.now + delay
        if key not in self.delayed or ready_at < self.delayed[key][0]:
            self.delayed[key] = (ready_at, self.calls)

    def get(self) -> str:
        key = self.queue.pop(0)
        self.dirty.remove(key)
        self.processing.add(key)
        return key

    def done(self, key: str) -> None:
        self.processing.remove(key)
        if key in self.dirty:
            self.queue.append(key)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        ready = sorted((when, key) for key, when in self.delayed.items() if when[0] <= self.now)
        for _, key in ready:
            del self.delayed[key]
            self.add(key)

    def shutdown(self) -> None:
        self.shut_down = True
        self.delayed.clear()


def assert_invariants(queue: WorkQueue[str]) -> None:
    queued = list(queue._queue)
    assert len(queued) == len(set(queued)), "a key is queued twice"
    assert set(queued) <= queue._dirty, "every queued key is dirty"
    assert not set(queued) & queue._processing, "no key is both queued and in flight"
    assert queue._dirty <= set(queued) | queue._processing, "a dirty key is queued or in flight"
    assert len(queue) == len(queued)


# Shutdown ends everything interesting, so it is not one of the random steps: it is inserted once,
# at a random position (or never, when the position is past the end).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(KEYS)),
        st.tuples(
            st.just("add_after"),
            st.sampled_from(KEYS),
            st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.5, 4.0]),
        ),
        st.tuples(st.just("get")),
        st.tuples(st.just("done"), st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1.0, 2.0])),
    ),
    min_size=5,
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(steps=operations, shutdown_at=st.integers(min_value=0, max_value=100))
async def test_random_operations_match_the_model_and_keep_the_invariants(
    steps: list[tuple[object, ...]], shutdown_at: int
) -> None:
    steps = [*steps[:shutdown_at], ("shutdown",), *steps[shutdown_at:]]
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("property", clock=clock)
    model = Model()
    for step in steps:
        match step:
            case ("add", str(key)):
                queue.add(key)
                model.add(key)
            case ("add_after", str(key), float(delay)):
                queue.add_after(key, delay)
                model.add_after(key, delay)
            case ("get",):
                if model.queue:
                    assert await queue.get() == model.get()
                elif model.shut_down:
                    with pytest.raises(QueueShutDown):
                        await queue.get()
            case ("done", int(index)):
                in_flight = sorted(model.processing)
                if in_flight:
                    key = in_flight[index % len(in_flight)]
                    queue.done(key)
                    model.done(key)
            case ("advance", float(seconds)):
                await clock.advance(seconds)
                model.advance(seconds)
            case ("shutdown",):
                queue.shutdown()
                model.shutdown()
        assert_invariants(queue)
        assert list(queue._queue) == model.queue
        assert queue._processing == model.processing
    for key in sorted(model.processing):
        queue.done(key)
    queue.shutdown()
    await clock.advance(1.0)
    assert clock.pending_sleepers == 0  # no timer or gauge updater is left behind

"""A bench's cells measured in several rounds: each figure the median of its rounds.

Why: a p99 of a few hundred reviews is about their fifth slowest, so on a two-core machine a
handful of host stalls in one window decide it (etcd's fsync, the load client's collector,
another process's turn), and they fall on either controller alike: upstream's own idle p99 at
25 reviews/s ranged 2.4-6.7 ms over six single-round runs of admission_bench.py, ours 2.5-7.3.
One round compares one draw of that noise with another. Rounds taken in turn (the sides'
order reversed every other round, so a drift of the machine favours neither) and the median
of each figure compare the controllers instead; the spread of the rounds is kept to show how
wide the noise was.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

K = TypeVar("K", bound=Hashable)
C = TypeVar("C", bound="DataclassInstance")
S = TypeVar("S")


def side_order(sides: Sequence[S], round_index: int) -> list[S]:
    """The sides in the order given in even rounds (0, 2, ...), reversed in odd ones."""
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


def median_of_rounds(rounds: Sequence[Mapping[K, C]], *, summed: Sequence[str] = ()) -> dict[K, C]:
    """Each cell measured in any round, its fields the median of the rounds that measured it,
    except the fields named in `summed`, added up (counts such as errors: a median would hide
    one round's).

    Cells are dataclass instances; a field that is None in some rounds (a figure only some
    windows have) is the median of the others, None when no round has it."""
    keys = list(dict.fromkeys(key for by in rounds for key in by))
    combined: dict[K, C] = {}
    for key in keys:
        cells = [by[key] for by in rounds if key in by]
        figures: dict[str, Any] = {}
        for field in dataclasses.fields(cells[0]):
            values = [getattr(c, field.name) for c in cells]
            present = [v for v in values if v is not None]
            if not present:
                figures[field.name] = None
            elif field.name in summed:
                figures[field.name] = sum(present)
            elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
                figures[field.name] = round(statistics.median(present))
            else:
                figures[field.name] = statistics.median(present)
        combined[key] = dataclasses.replace(cells[0], **figures)
    return combined


def spread(rounds: Sequence[Mapping[K, Any]], key: K, attr: str) -> tuple[float, float] | None:
    """The lowest and highest of one figure over the rounds that measured the cell; None when
    fewer than two did (nothing to spread)."""
    values = [getattr(by[key], attr) for by in rounds if key in by]
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    return min(present), max(present)

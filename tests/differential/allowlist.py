"""The one list of differences between upstream's controller v0.12.0 and ours that the
differential tests accept. Every other difference fails its scenario.

An entry names the scenarios (a glob over `<scenario id>/<checkpoint>`, admission cases as
`admission-<case>/answer`), the difference's path (a glob over `compare.Difference.path`), and
optionally what each side's value must look like (globs over the value's text; `*` is the only
wildcard in every glob here), and says why: a behaviour of upstream's v0.13 line that v0.12.0
lacks, or a deliberate difference that the docs name (the entry says where). Keep it short: a
difference that is a bug of ours is fixed, not listed here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from tests.differential.compare import ABSENT, Difference


@cache
def _pattern(glob: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in glob.split("*")), re.S)


def matches(glob: str, text: str) -> bool:
    return _pattern(glob).fullmatch(text) is not None


@dataclass(frozen=True)
class Allowed:
    scenarios: str
    path: str
    why: str
    upstream: str = "*"
    ours: str = "*"
    # A further condition on the two values, where a glob cannot say it.
    check: Callable[[Difference], bool] | None = None
    # False for a difference that depends on timing (it may not show in every run), which
    # `test_every_allow_list_entry_is_still_needed` therefore does not ask for.
    always: bool = True

    def covers(self, scenario: str, difference: Difference) -> bool:
        return (
            matches(self.scenarios, scenario)
            and matches(self.path, difference.path)
            and matches(self.upstream, _text(difference.upstream))
            and matches(self.ours, _text(difference.ours))
            and (self.check is None or self.check(difference))
        )


def _text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _same_quantity(d: Difference) -> bool:
    return isinstance(d.upstream, str) and isinstance(d.ours, int) and str(d.ours) == d.upstream


def _upstream_text_kept(d: Difference) -> bool:
    """Ours carries each of upstream's message texts (what follows each "Internal error: ")."""
    texts = re.split(r"(?:, )?<nil>: Internal error: |^Internal error: ", str(d.upstream))[1:]
    return bool(texts) and all(text.rstrip("]") in str(d.ours) for text in texts)


def _same_tail(marker: str) -> Callable[[Difference], bool]:
    """Both messages end with the same text from `marker` on."""

    def check(d: Difference) -> bool:
        up, ours = str(d.upstream), str(d.ours)
        return marker in up and up[up.index(marker) :] == ours[ours.rfind(marker) :]

    return check


_IMMUTABLE = re.compile(r"Invalid value: (\[.*\]): field is immutable")


def _same_replicated_jobs(d: Difference) -> bool:
    """`field is immutable` with the same replicatedJobs (decoded, empty fields dropped)."""
    up, ours = _IMMUTABLE.search(str(d.upstream)), _IMMUTABLE.search(str(d.ours))
    if up is None or ours is None:
        return False
    return bool(_dense(json.loads(up.group(1))) == _dense(json.loads(ours.group(1))))


def _dense(value: object) -> object:
    if isinstance(value, dict):
        children = {k: _dense(v) for k, v in value.items()}
        return {k: v for k, v in children.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_dense(v) for v in value]
    return value


_FIRST_FAILURE = (
    "deliberate, docs/behaviour.md#restart-timeline: ours continues a restart's or a failure's "
    "message (condition and Event) with the first failed pod, its node, container and exit "
    "code, when its pod cache has seen that pod fail (two watches: not every time); upstream's "
    "text stays the prefix"
)


def _upstream_text_then_the_pod(d: Difference) -> bool:
    """Ours is upstream's message, then ': <reason>, pod <pod> on node <node>...'."""
    up, ours = str(d.upstream), str(d.ours)
    return ours.startswith(up + ": ") and ", pod " in ours[len(up) :]


_PATHS_ADDED = (
    "deliberate, docs/api.md#validation: every validation error carries a field path and a "
    "Kubernetes error type where upstream reports InternalError without a path; the message "
    "text is upstream's"
)

ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "*",
        "jobset.status.conditions.*.message",
        _FIRST_FAILURE,
        check=_upstream_text_then_the_pod,
        always=False,
    ),
    Allowed(
        "*",
        "events[*(first failed job: *): *, pod * on node *]",
        _FIRST_FAILURE,
        upstream=ABSENT,
        ours="emitted",
        always=False,
    ),
    Allowed(
        "*",
        "events[*(first failed job: *)*]",
        _FIRST_FAILURE + " (ours' Event is the one with the pod)",
        upstream="emitted",
        ours=ABSENT,
        always=False,
    ),
    Allowed(
        "*",
        "events[*'RestartCompleted'*]",
        "deliberate, docs/behaviour.md#restart-timeline: when a whole-JobSet restart is over "
        "(every Job of the new attempt ready), ours emits a Normal RestartCompleted Event with "
        "each phase's seconds; upstream has no such Event",
        upstream=ABSENT,
        ours="emitted",
    ),
    Allowed(
        "*",
        "jobs.*.spec.template.metadata.labels.jobset.sigs.k8s.io/exclusive-placement",
        "deliberate, docs/reconcile.md (exclusive placement): with the pod webhooks called, "
        "ours labels the pod template of an exclusive Job leader-follower and its pod webhooks "
        "place the pods; upstream's webhooks decide from the pod's annotations",
        upstream=ABSENT,
        ours="leader-follower",
    ),
    Allowed(
        "*",
        "jobset.spec.replicatedJobs[*].template.spec.template.spec.*containers[*].resources.*",
        "deliberate, docs/api.md#defaulting-the-mutating-webhook: our mutating webhook keeps a "
        'quantity as written (1); upstream\'s Go round trip writes it canonical ("1"): the same '
        "quantity",
        check=_same_quantity,
    ),
    Allowed("admission-*", "causes[*].field", _PATHS_ADDED, upstream="<nil>", ours="spec.*"),
    Allowed("admission-*", "causes[*].reason", _PATHS_ADDED, upstream="InternalError"),
    Allowed(
        "admission-*",
        "causes[*].message",
        _PATHS_ADDED,
        upstream="Internal error: *",
        check=_upstream_text_kept,
    ),
    Allowed(
        "admission-*",
        "message",
        _PATHS_ADDED,
        upstream='admission webhook "vjobset.kb.io" denied the request: * is invalid: *<nil>: '
        "Internal error: *",
        ours='admission webhook "vjobset.kb.io" denied the request: * is invalid: *spec.*',
        check=_upstream_text_kept,
    ),
    Allowed(
        "admission-claim-not-mounted/*",
        "causes[0].field",
        "deliberate, docs/api.md#validation: a claim template no container mounts is reported at "
        "the template's name; upstream reports it at spec.replicatedJobs with all of them as "
        "the value",
        upstream="spec.replicatedJobs",
        ours="spec.volumeClaimPolicies[0].templates[0].metadata.name",
    ),
    Allowed(
        "admission-claim-not-mounted/*",
        "*message",
        "the same (see above): only the field and the value shown differ, the text is upstream's",
        check=_same_tail("replicatedJob containers don't have a matching volumeMount"),
    ),
    Allowed(
        "admission-update-*",
        "*message",
        "deliberate, docs/api.md#validation: `field is immutable` shows the new replicatedJobs "
        "as the JSON the client wrote (its field order and empty fields); upstream shows its Go "
        "encoding of them; the same value",
        check=_same_replicated_jobs,
    ),
    Allowed(
        "admission-replicas-negative/*",
        "*",
        "deliberate, docs/api.md#validation: our CRD refuses a negative replicatedJobs[].replicas "
        "(minimum 0); upstream v0.12's CRD admits it",
    ),
    Allowed(
        "admission-active-deadline-zero/*",
        "*",
        "deliberate, docs/api.md#validation: our CRD has spec.activeDeadlineSeconds (KEP-1186, "
        "ahead of upstream) with minimum 1 and refuses 0; upstream v0.12's CRD lacks the field "
        "and prunes it, so any value passes",
    ),
    Allowed(
        "admission-active-deadline-kept/*",
        "spec.activeDeadlineSeconds",
        "the same (see above): our CRD keeps spec.activeDeadlineSeconds, whatever the gate; "
        "upstream v0.12's prunes it",
        upstream=ABSENT,
        ours="30",
    ),
    Allowed(
        "admission-rule-pattern-invalid/*",
        "*",
        "deliberate, docs/reconcile.md#behaviour-details: validation refuses an "
        "onJobFailureMessagePatterns entry that Go's regexp (RE2) would not compile; upstream "
        "v0.12 admits it and the rule never matches",
    ),
    Allowed(
        "*",
        "events[*'JobCreationFailed'*already exists*]",
        "deliberate, docs/behaviour.md#reconcile-order (when a pass may not run yet): ours "
        "skips a pass while its Job cache is behind its own creates and deletes; upstream runs "
        "it, may create a Job whose predecessor is still being deleted, and reports the "
        "AlreadyExists answer as this Event",
        upstream="emitted",
        ours=ABSENT,
        always=False,
    ),
)


def unexplained(scenario: str, found: list[Difference]) -> list[Difference]:
    """The differences no entry covers."""
    return [d for d in found if not any(a.covers(scenario, d) for a in ALLOWED)]

"""Upstream's CRD and ours carry the same `x-kubernetes-*` extensions (marker `differential`).

Why: the extensions decide what clients see beyond validation. `x-kubernetes-map-type`,
`x-kubernetes-list-type` and `x-kubernetes-list-map-keys` decide how server-side apply merges a
client's apply (which fields its manager owns, which it replaces whole); `x-kubernetes-validations`
are admission answers; `x-kubernetes-int-or-string` and `preserve-unknown-fields` decide what is
kept. Kubeflow Trainer's apply owned `configMap` whole on upstream's CRD and field by field on ours
before crdgen added the marks upstream's has.

Every extension of either CRD is a (schema path, key, value) triple; the two sets must be equal
but for `OURS_ONLY`, each entry with its reason. Nothing of upstream's may be missing from ours.
The CRDs compared are the files each side installs (upstream's from hack/upstream-jobset.sh's
cache, ours from manifests/crd/bases, which the chart links).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.crdgen import CRD_FILE
from jobset_controller_dev.envtest.upstream import ensure_upstream, upstream_crds

ROOT = Path(__file__).resolve().parents[2]
Extension = tuple[str, str, str]

# Extensions only our CRD has: a glob over the schema path, the extension key, and why.
OURS_ONLY: tuple[tuple[str, str, str], ...] = (
    (
        "v1alpha2.spec.scheduling*",
        "*",
        "gang scheduling's `spec.scheduling` (docs/behaviour.md 11.3, KEP-969), which "
        "upstream's v0.12.0 schema does not have: its list types and CEL rules come with it",
    ),
    (
        "v1alpha2.spec.replicatedJobs[].template.spec.scheduling*",
        "*",
        "batch/v1 Job's `scheduling` of Kubernetes 1.37: our Job template comes from a v1.37.2 "
        "API server's OpenAPI, upstream's from k8s.io/api v0.36",
    ),
    (
        "v1alpha2.spec.replicatedJobs[].template.spec.template.spec.*",
        "x-kubernetes-list-*",
        "pod fields of Kubernetes 1.37 (`evictionResponders`, `volumeMounts[].bindMountOptions`) "
        "absent from upstream's k8s.io/api v0.36 pod template",
    ),
    (
        "v1alpha2.spec.replicatedJobs[].template.spec.template.spec.evictionResponders[]",
        "x-kubernetes-map-type",
        "the same Kubernetes 1.37 field's items",
    ),
    (
        "v1alpha2.spec.volumeClaimPolicies[].templates[].status.healthStatus.healthConditions",
        "x-kubernetes-list-*",
        "a PersistentVolumeClaim status field of Kubernetes 1.37, absent from k8s.io/api v0.36",
    ),
    (
        "v1alpha2.spec.failurePolicy.rules[].onJobFailureMessagePatterns",
        "x-kubernetes-list-type",
        "`atomic` spelled out: a list without the key is atomic already, so server-side apply "
        "treats it alike on both CRDs",
    ),
)


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def extensions(crd: Mapping[str, Any]) -> set[Extension]:
    """Every `x-kubernetes-*` of every served version's schema: (path, key, value as YAML)."""
    found: set[Extension] = set()
    for version in crd["spec"]["versions"]:
        found.update(_walk(version["schema"]["openAPIV3Schema"], version["name"]))
    return found


def _walk(schema: Mapping[str, Any], path: str) -> Iterator[Extension]:
    for key, value in schema.items():
        if key.startswith("x-kubernetes-"):
            yield path, key, yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        elif key == "properties":
            for name, child in value.items():
                yield from _walk(child, f"{path}.{name}")
        elif key == "items":
            yield from _walk(value, f"{path}[]")
        elif key == "additionalProperties" and isinstance(value, Mapping):
            yield from _walk(value, f"{path}{{}}")
        elif key in ("allOf", "anyOf", "oneOf"):
            for index, child in enumerate(value):
                yield from _walk(child, f"{path}<{key}{index}>")
        elif key == "not":
            yield from _walk(value, f"{path}<not>")


def _load(path: Path) -> dict[str, Any]:
    (crd,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    found: dict[str, Any] = crd
    return found


@pytest.fixture(scope="module")
def both() -> tuple[set[Extension], set[Extension]]:
    (upstream,) = upstream_crds(ensure_upstream())
    return extensions(_load(upstream)), extensions(_load(ROOT / "manifests/crd/bases" / CRD_FILE))


def test_every_extension_of_upstreams_crd_is_in_ours(
    both: tuple[set[Extension], set[Extension]],
) -> None:
    upstream, ours = both
    missing = sorted(upstream - ours)
    assert not missing, "\n".join(f"{p}: {k}: {v}" for p, k, v in missing)


def test_ours_adds_only_the_listed_extensions_and_each_listing_is_still_needed(
    both: tuple[set[Extension], set[Extension]],
) -> None:
    upstream, ours = both
    used: set[int] = set()
    unexplained = []
    for path, key, value in sorted(ours - upstream):
        matched = [
            index
            for index, (glob, key_glob, _) in enumerate(OURS_ONLY)
            if _glob(glob).fullmatch(path) and _glob(key_glob).fullmatch(key)
        ]
        used.update(matched)
        if not matched:
            unexplained.append(f"{path}: {key}: {value}")
    assert not unexplained, "\n".join(unexplained)
    unused = [OURS_ONLY[i][:2] for i in range(len(OURS_ONLY)) if i not in used]
    assert not unused, f"entries no extension needs any more: {unused}"

"""The placement-mode probe recognises a follower refused by the validating pod webhook under
either name it is installed with: the manifests' (`vpod.kb.io`) or the Helm chart's
(`validate--v1-pod.x-k8s.io`, upstream's chart's name, kept so releases can switch charts)."""

from __future__ import annotations

import pytest

from jobset_controller.controller.placement_mode import follower_was_handled


@pytest.mark.parametrize("name", ["vpod.kb.io", "validate--v1-pod.x-k8s.io"])
def test_a_refusal_by_either_name_means_the_validating_webhook_ran(name: str) -> None:
    refusal = f'admission webhook "{name}" denied the request: leader pod not scheduled'
    assert follower_was_handled(None, refusal)


def test_a_refusal_by_another_webhook_does_not_count() -> None:
    refusal = 'admission webhook "validate.example.com" denied the request: no'
    assert not follower_was_handled(None, refusal)
    assert not follower_was_handled(None, None)

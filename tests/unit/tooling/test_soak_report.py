"""The soak's table names which requests a controller spends, per finished JobSet."""

from __future__ import annotations

from jobset_controller_dev.soak import report
from jobset_controller_dev.soak.run import request_kind


def test_a_request_kind_names_the_verb_resource_and_subresource() -> None:
    assert request_kind("update", {"resource": "jobsets", "subresource": "status"}) == (
        "update jobsets/status"
    )
    assert request_kind("create", {"resource": "jobs"}) == "create jobs"


def test_requests_by_kind_are_ranked_and_divided_by_the_finished_jobsets() -> None:
    figures = {
        "finished": 4,
        "requests_by_kind": {"create jobs": 8, "update jobsets/status": 28, "get leases": 2},
    }
    assert report.requests_by_kind(figures, top=2) == (
        "update jobsets/status 7.00, create jobs 2.00"
    )


def test_figures_written_before_the_breakdown_print_a_dash() -> None:
    assert report.requests_by_kind({"finished": 10}) == "-"

"""Generated names and apimachinery's name checks with their exact message texts.

See docs/behaviour.md#names.
"""

import hashlib

import pytest

from jobset_controller.api import Coordinator, FieldError, JobSet, Network, ObjectMeta
from jobset_controller.api.name_checks import (
    is_dns1035_label,
    is_dns1123_subdomain,
    is_domain_prefixed_path,
    is_valid_label_value,
)
from jobset_controller.api.naming import (
    coordinator_endpoint,
    job_key,
    job_name,
    jobset_coordinator_endpoint,
    jobset_subdomain,
    name_for_validation,
    pod_hostname,
    pvc_name,
    subdomain,
)

DNS1035_FORMAT = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_FORMAT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_VALUE_FORMAT = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def test_job_pod_and_pvc_names_follow_the_generated_name_table() -> None:
    assert job_name("js", "workers", 3) == "js-workers-3"
    assert pod_hostname("js", "workers", 3, 7) == "js-workers-3-7"
    assert pvc_name("data", "js") == "data-js"


def test_subdomain_is_network_subdomain_else_jobset_name() -> None:
    assert subdomain("js", None) == "js"
    assert subdomain("js", Network()) == "js"
    assert subdomain("js", Network(subdomain="net")) == "net"
    assert jobset_subdomain(JobSet(metadata=ObjectMeta(name="js"))) == "js"


def test_coordinator_endpoint_is_pod_hostname_dot_subdomain() -> None:
    coordinator = Coordinator(replicated_job="driver", job_index=1, pod_index=2)
    assert coordinator_endpoint("js", coordinator, "net") == "js-driver-1-2.net"
    js = JobSet.model_validate(
        {"metadata": {"name": "js"}, "spec": {"coordinator": {"replicatedJob": "driver"}}}
    )
    assert jobset_coordinator_endpoint(js) == "js-driver-0-0.js"
    assert jobset_coordinator_endpoint(JobSet()) is None


def test_job_key_is_sha1_of_namespace_slash_job_name() -> None:
    expected = hashlib.sha1(b"ml/trainer-workers-0").hexdigest()
    assert job_key("ml", "trainer-workers-0") == expected
    assert len(expected) == 40


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param(ObjectMeta(name="js"), "js", id="name wins"),
        pytest.param(ObjectMeta(name="js", generate_name="gen-"), "js", id="name wins over gen"),
        pytest.param(ObjectMeta(generate_name="gen-"), "gen-abcde", id="generateName plus 5"),
        pytest.param(ObjectMeta(generate_name="g" * 80), "g" * 58 + "abcde", id="prefix cut to 58"),
        pytest.param(ObjectMeta(), "", id="neither gives empty name"),
    ],
)
def test_name_for_validation_simulates_the_name_generator(
    metadata: ObjectMeta, expected: str
) -> None:
    assert name_for_validation(metadata) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("my-name", [], id="valid"),
        pytest.param("a" * 63, [], id="63 chars is the limit"),
        pytest.param("a" * 64, ["must be no more than 63 characters"], id="64 chars too long"),
        pytest.param("1abc", [DNS1035_FORMAT], id="must start with a letter"),
        pytest.param("abc-", [DNS1035_FORMAT], id="must end alphanumeric"),
        pytest.param("My-name", [DNS1035_FORMAT], id="no upper case"),
        pytest.param("a.b", [DNS1035_FORMAT], id="no dots"),
        pytest.param("", [DNS1035_FORMAT], id="empty"),
        pytest.param("abc\n", [DNS1035_FORMAT], id="trailing newline is not ignored"),
        pytest.param(
            "A" * 64,
            ["must be no more than 63 characters", DNS1035_FORMAT],
            id="length first then format",
        ),
    ],
)
def test_dns1035_label_messages(value: str, expected: list[str]) -> None:
    assert is_dns1035_label(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("example.com", [], id="valid"),
        pytest.param("1abc", [], id="may start with a digit"),
        pytest.param("Example.com", [DNS1123_SUBDOMAIN_FORMAT], id="no upper case"),
        pytest.param("a..b", [DNS1123_SUBDOMAIN_FORMAT], id="empty label"),
        pytest.param("a" * 254, ["must be no more than 253 characters"], id="too long"),
    ],
)
def test_dns1123_subdomain_messages(value: str, expected: list[str]) -> None:
    assert is_dns1123_subdomain(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", [], id="empty is a valid label value"),
        pytest.param("My_value.1", [], id="mixed case underscore dot"),
        pytest.param("-bad", [LABEL_VALUE_FORMAT], id="must start alphanumeric"),
        pytest.param("a" * 64, ["must be no more than 63 characters"], id="too long"),
    ],
)
def test_label_value_messages(value: str, expected: list[str]) -> None:
    assert is_valid_label_value(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("acme.io/foo", [], id="valid"),
        pytest.param("jobset.sigs.k8s.io/jobset-controller", [], id="the reserved controller name"),
        pytest.param("", [FieldError("f", "Required", "")], id="empty is required"),
        pytest.param(
            "acme.io",
            [
                FieldError(
                    "f",
                    "Invalid",
                    'must be a domain-prefixed path (such as "acme.io/foo")',
                    "acme.io",
                )
            ],
            id="no slash",
        ),
        pytest.param(
            "/foo",
            [
                FieldError(
                    "f", "Invalid", 'must be a domain-prefixed path (such as "acme.io/foo")', "/foo"
                )
            ],
            id="empty host",
        ),
        pytest.param(
            "Acme/foo",
            [FieldError("f", "Invalid", DNS1123_SUBDOMAIN_FORMAT, "Acme")],
            id="host not a subdomain",
        ),
        pytest.param(
            "acme.io/a b",
            [
                FieldError(
                    "f",
                    "Invalid",
                    "must be a valid path (regex used for validation is "
                    "'[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
                    "a b",
                )
            ],
            id="path with a space",
        ),
    ],
)
def test_domain_prefixed_path_errors(value: str, expected: list[FieldError]) -> None:
    assert is_domain_prefixed_path("f", value) == expected

"""Kubernetes name and label checks, with apimachinery's message texts.

Why reimplement them: the webhook's messages embed these texts verbatim (and upstream replaces
some by matching on them, e.g. the "must be no more than 63 characters" length message), so the
texts, their order (length first, then format) and the regexes are part of the contract. The
functions are pure and return lists of messages, empty when the value is valid, as apimachinery's
``IsDNS1035Label`` and friends do.
"""

import re
from typing import Final

from jobset_controller.api.field_errors import FieldError

DNS1035_LABEL_MAX_LENGTH: Final = 63
DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253
LABEL_VALUE_MAX_LENGTH: Final = 63

_DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_HTTP_PATH_FMT: Final = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"


def max_len_error(length: int) -> str:
    """apimachinery's ``MaxLenError`` text."""
    return f"must be no more than {length} characters"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``RegexError`` text, including its odd ``',  or '`` example separator."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    quoted = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {quoted}regex used for validation is '{fmt}')"


def _matches(fmt: str, value: str) -> bool:
    return re.fullmatch(fmt, value) is not None


def byte_length(value: str) -> int:
    """Length as Go's ``len`` counts it (UTF-8 bytes), which is what every limit here means.

    A lone surrogate (which no JSON reader of the API server lets through: Go's writes U+FFFD, also
    three bytes) counts three bytes instead of raising: a check must answer, never trace.
    """
    return len(value.encode("utf-8", "surrogatepass"))


def is_dns1035_label(value: str) -> list[str]:
    """Messages for why ``value`` is not a DNS-1035 label (RFC 1035), empty if it is one."""
    errors: list[str] = []
    if byte_length(value) > DNS1035_LABEL_MAX_LENGTH:
        errors.append(max_len_error(DNS1035_LABEL_MAX_LENGTH))
    if not _matches(_DNS1035_LABEL_FMT, value):
        errors.append(regex_error(_DNS1035_LABEL_ERR, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    """Messages for why ``value`` is not a DNS-1123 subdomain, empty if it is one."""
    errors: list[str] = []
    if byte_length(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _matches(_DNS1123_SUBDOMAIN_FMT, value):
        errors.append(regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def is_valid_label_value(value: str) -> list[str]:
    """Messages for why ``value`` cannot be a label value, empty if it can."""
    errors: list[str] = []
    if byte_length(value) > LABEL_VALUE_MAX_LENGTH:
        errors.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if not _matches(_LABEL_VALUE_FMT, value):
        errors.append(
            regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def is_domain_prefixed_path(field: str, value: str) -> list[FieldError]:
    """Field errors for why ``value`` is not a domain-prefixed path such as ``acme.io/foo``.

    Mirrors apimachinery's ``IsDomainPrefixedPath``: the part before the first "/" must be a
    DNS-1123 subdomain and the rest a non-empty HTTP path.
    """
    if not value:
        return [FieldError(field, "Required", "")]
    host, slash, path = value.partition("/")
    if not slash or not host or not path:
        return [
            FieldError(
                field, "Invalid", 'must be a domain-prefixed path (such as "acme.io/foo")', value
            )
        ]
    errors = [FieldError(field, "Invalid", message, host) for message in is_dns1123_subdomain(host)]
    if not _matches(_HTTP_PATH_FMT, path):
        errors.append(
            FieldError(field, "Invalid", regex_error("must be a valid path", _HTTP_PATH_FMT), path)
        )
    return errors

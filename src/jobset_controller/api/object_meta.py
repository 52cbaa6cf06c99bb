"""The API server's checks of a new object's ``metadata`` (apimachinery's ObjectMeta validation).

Why here: these checks run in the API server for every custom resource, before any admission
webhook, so the webhook never needs them; but an offline answer to "would this manifest be
accepted?" does. A manifest with a 1 MiB annotation or an upper-case name is refused by the
server, and ``jobset-controller validate`` must say so too. Messages, field paths and the order
of the checks are the server's (Kubernetes 1.36), so the two answers read the same.

What is checked, for the top-level ``metadata`` of a create request: name or generateName present,
both DNS-1123 subdomains (generateName with its trailing dash masked, the name as generated from
it), namespace a DNS-1123 label when set, label keys and values, annotation keys and their total
size (256 KiB), finalizer names. Not checked: ownerReferences and managedFields, which the server
validates too but no user manifest should carry; and generation, which the server sets to 1 on
create before validating (a negative one in a manifest is accepted and replaced).
"""

import re
from collections.abc import Iterable, Mapping
from typing import Final

from jobset_controller.api.field_errors import FieldError
from jobset_controller.api.name_checks import (
    byte_length,
    is_dns1123_subdomain,
    is_valid_label_value,
    max_len_error,
    regex_error,
)
from jobset_controller.api.naming import name_for_validation
from jobset_controller.api.types import ObjectMeta

# apimachinery's TotalAnnotationSizeLimitB: keys and values together, in bytes.
TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: Final = 256 * 1024

_LABEL_KEY_NAME_MAX_LENGTH: Final = 63
_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_EXAMPLES: Final = ("MyName", "my.name", "123-abc")
_DNS1123_LABEL_MAX_LENGTH: Final = 63
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_ORPHAN_FINALIZER: Final = "orphan"
_FOREGROUND_FINALIZER: Final = "foregroundDeletion"


def validate_object_meta(metadata: ObjectMeta, path: str = "metadata") -> list[FieldError]:
    """Errors the API server reports for ``metadata`` of an object being created."""
    errors: list[FieldError] = []
    generate_name = metadata.generate_name or ""
    if generate_name:
        errors += [
            FieldError(f"{path}.generateName", "Invalid", message, generate_name)
            for message in is_dns1123_subdomain(_mask_trailing_dash(generate_name))
        ]
    # On create the server fills an empty name from generateName before validating it.
    name = name_for_validation(metadata)
    if not name:
        errors.append(FieldError(f"{path}.name", "Required", "name or generateName is required"))
    else:
        errors += [
            FieldError(f"{path}.name", "Invalid", message, name)
            for message in is_dns1123_subdomain(name)
        ]
    if metadata.namespace:
        errors += [
            FieldError(f"{path}.namespace", "Invalid", message, metadata.namespace)
            for message in is_dns1123_label(metadata.namespace)
        ]
    errors += validate_labels(metadata.labels, f"{path}.labels")
    errors += validate_annotations(metadata.annotations, f"{path}.annotations")
    errors += _validate_finalizers(metadata.finalizers, f"{path}.finalizers")
    return errors


def validate_labels(labels: Mapping[str, str], path: str) -> list[FieldError]:
    """Every key a qualified name, every value a label value; errors at the map's path."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += [FieldError(path, "Invalid", message, key) for message in is_label_key(key)]
        errors += [
            FieldError(path, "Invalid", message, value) for message in is_valid_label_value(value)
        ]
    return errors


def validate_annotations(annotations: Mapping[str, str], path: str) -> list[FieldError]:
    """Keys qualified names (case ignored); keys and values at most 256 KiB together."""
    errors = [
        FieldError(path, "Invalid", message, key)
        for key in annotations
        for message in is_label_key(key.lower())
    ]
    size = sum(byte_length(key) + byte_length(value) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES:
        errors.append(
            FieldError(
                path, "TooLong", f"may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT_BYTES} bytes"
            )
        )
    return errors


def _validate_finalizers(finalizers: Iterable[str], path: str) -> list[FieldError]:
    names = list(finalizers)
    errors = [
        FieldError(path, "Invalid", message, name)
        for name in names
        for message in is_label_key(name)
    ]
    if _ORPHAN_FINALIZER in names and _FOREGROUND_FINALIZER in names:
        message = f"finalizer {_ORPHAN_FINALIZER} and {_FOREGROUND_FINALIZER} cannot be both set"
        errors.append(FieldError(path, "Invalid", message, names))
    return errors


def is_label_key(value: str) -> list[str]:
    """Messages for why ``value`` is not a qualified name (``[prefix/]name``), empty if it is."""
    key_regex_error = regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, *_LABEL_KEY_EXAMPLES)
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {key_regex_error} with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {message}" for message in is_dns1123_subdomain(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif byte_length(name) > _LABEL_KEY_NAME_MAX_LENGTH:
        errors.append(f"name part {max_len_error(_LABEL_KEY_NAME_MAX_LENGTH)}")
    if re.fullmatch(_LABEL_KEY_FMT, name) is None:
        errors.append(f"name part {key_regex_error}")
    return errors


def is_dns1123_label(value: str) -> list[str]:
    """Messages for why ``value`` is not a DNS-1123 label (a namespace name), empty if it is."""
    errors: list[str] = []
    if byte_length(value) > _DNS1123_LABEL_MAX_LENGTH:
        errors.append(max_len_error(_DNS1123_LABEL_MAX_LENGTH))
    if re.fullmatch(_DNS1123_LABEL_FMT, value) is None:
        if re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value) is not None:
            # Already length-checked, so what makes it a subdomain but not a label is a dot.
            errors.append("must not contain dots")
        else:
            errors.append(regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def _mask_trailing_dash(name: str) -> str:
    """apimachinery's maskTrailingDash, byte for byte: it drops two characters, not one."""
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name

"""RFC 3339 times as Kubernetes writes them (``metav1.Time``: whole seconds, UTC, ``Z``).

Conditions are compared as written, so the format must be stable: the same ``now`` always renders
to the same string. Parsing accepts what the API server may send (``Z`` or an offset, fractional
seconds from MicroTime fields) and returns None instead of raising on anything else.
"""

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` in UTC, sub-second part dropped as metav1.Time does."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime | None:
    """The aware UTC datetime of an RFC 3339 string, or None when absent or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)

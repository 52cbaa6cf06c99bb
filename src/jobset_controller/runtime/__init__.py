"""Generic controller machinery: it knows nothing of the JobSet API.

Nothing here imports ``jobset_controller.api``, ``reconcile`` or ``controller``; the dependency
direction is an import-linter contract in ``pyproject.toml``. So no JobSet type, label, condition
or rule is read or decided here: what is a controller's own (its name, the label of its log
lines, the Lease, the webhook configurations whose caBundle is kept) is passed in by the caller.

What still spells the product's name, and why it is here:

- Metric names of this process's published surface, read by the shipped Prometheus rules and
  dashboards: ``jobset_events_dropped_total`` (``events``) and ``jobset_event_loop_lag_seconds``
  with ``jobset_event_loop_lag_distribution_seconds`` (``looplag``). The module that measures
  owns the name, as ``workqueue`` and the webhook server own controller-runtime's.
- The client's default User-Agent (``client``), for callers that pass none (tools, tests).
  The Lease's name and timings have no default here: the Configuration owns them.

Two modules every other one leans on: ``resources`` (where a kind lives in the API; every path
is built from it) and ``clock`` (the one Clock and RandomSource each piece takes, real by
default, so every wait and jitter can be stepped in tests).
"""

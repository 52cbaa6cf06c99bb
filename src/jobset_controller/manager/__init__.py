"""The manager: one process run of the controller, as runnable groups (controller-runtime's shape).

Each module owns one concern:

- `environment`: the options (flags merged over the Configuration; config.py owns every
  default, the certificates' lifetimes included),
  the namespaces, the identity;
- `clients`: the API clients a run opens (the shared one, the metrics endpoint's own);
- `certificates`: where each HTTPS port's certificate comes from (one context builder for all);
- `servers`: the served ports (health, metrics, webhooks) as runnables; a new port lands here;
- `controllers`: one unit per controller (informers, queue, workers, metrics, Event recorder,
  what it asks the API server before it is built);
  a new informer added to a unit is part of /readyz by construction;
- `leadership`: the Lease and its own client;
- `shutdown`: the stop order and its budgets;
- `preload`: what is loaded once the process is ready;
- `assembly`: every part built and its runnables declared (the one list of parts);
- `lifecycle`: `Manager.run`, the phases in order over `runtime.runnables`' groups.

May import: `config`, `controller`, `webhook`, `runtime`, `api` (never `cli` or `tools`).
"""

from jobset_controller.manager.environment import (
    ManagerOptions,
    controller_namespace,
    leader_election_namespace,
)
from jobset_controller.manager.lifecycle import Manager

__all__ = ["Manager", "ManagerOptions", "controller_namespace", "leader_election_namespace"]

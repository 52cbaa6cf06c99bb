"""JobSet glue between the generic runtime and the pure reconcile core.

`informers` says which objects are cached and how child events map to the owning JobSet's key;
`executor` applies a Plan to the cluster in a fixed order; `jobset` takes a snapshot from the
caches, calls the pure `reconcile`, and hands the Plan to the executor. `resources` names
where each kind lives; `permissions` declares every API grant this code needs.

May import: `api`, `reconcile`, `runtime` (never `manager`, `cli`, `webhook`).
"""

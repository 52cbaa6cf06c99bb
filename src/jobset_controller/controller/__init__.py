"""The controllers' glue between the generic runtime and the pure cores (reconcile, api).

The JobSet controller: `informers` says which objects are cached (trimmed) and how child events
map to the owning JobSet's key; `jobset` takes a snapshot from the caches, calls the pure
`reconcile`, and hands the Plan to `executor`, which applies it in a fixed order; `expectations`
holds the Jobs a pass created that the Job cache has not shown yet, so the next pass does not
read a cache behind our own writes.

Exclusive placement: `pods` is the pod controller (trimmed pod and node caches, the release and
repair of followers decided by `reconcile.pod_placement`; its caches are also the pod webhooks'
lookups); `placement_mode` asks the API server, by dry-run probe pods, whether the pod webhooks
are really called, which decides how new Jobs are placed.

Shared: `resources` names where each kind lives; `webhookcerts` holds JobSet's names for the
internal certificate management (`runtime.certrotator` is the generic part); `permissions`
declares every API grant this code needs (the shipped RBAC is generated from it).

May import: `api`, `reconcile`, `runtime` (never `manager`, `cli`, `config`, `webhook`,
`tools`: the `product-layers` import contract).
"""

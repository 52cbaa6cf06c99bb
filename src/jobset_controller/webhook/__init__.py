"""Admission webhooks: JobSet defaulting and validation, and the exclusive-placement pod webhooks.

`admission` (JobSets) and `pods` (leader/follower pod placement) are pure: AdmissionReview in,
AdmissionReview out, with the cluster reads the pod decisions need injected as lookups. They reuse
the API package's defaulting, validation and placement facts, so the webhooks, the controllers'
in-memory defaulting and pod placement, and `jobset-controller validate` can never disagree.
`review` owns the AdmissionReview envelope both answer in and the check that turns a malformed
review into a 400. `server` serves them over TLS with a context it is handed.

May import: `api` (the `webhook-pure` import contract forbids `reconcile` and `runtime`), and,
for `server` alone, `runtime.http1server`, the generic HTTP server it serves with. Being beside
`controller` in the layers, it may not import `controller` either, nor anything above it.
"""

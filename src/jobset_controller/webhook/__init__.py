"""Admission webhooks for JobSets: defaulting (mutating) and validation (validating).

`admission` is pure (AdmissionReview in, AdmissionReview out) and reuses the API package's
defaulting and validation, so the webhook, the controller's in-memory defaulting and
`jobset-controller validate` can never disagree. `server` serves it over TLS.

May import: `api` only (the `webhook-pure` import contract).
"""

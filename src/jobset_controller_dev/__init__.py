"""Development tooling for jobset-controller: never part of the wheel or the image.

`envtest` runs real local clusters (tests, benchmarks, `make dev`); `crdgen` writes the CRD and
`rbacgen` the shipped RBAC from the product's own declarations; `devloop` is `make dev`; `image`
builds the controller's images (the base, the venv, the release's OCI archive) and runs them for
the image tests.

May import: `jobset_controller` (the product never imports this package: the
`product-without-dev` import contract). Inside it, `devloop | crdgen | rbacgen | image` sit on
`envtest`.
"""

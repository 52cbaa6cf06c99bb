# The README's two commands live here. Everything else is in hack/.
.PHONY: test dev binaries crd rbac release

test:  ## install what is needed and run ruff, mypy and every test tier (docs/testing.md)
	hack/test.sh

dev:  ## bring up a local cluster and run the controller on an example JobSet
	hack/dev.sh

binaries:  ## build (once) and cache the Kubernetes binaries
	hack/k8s-binaries.sh

crd:  ## regenerate manifests/crd/bases from a real kube-apiserver's OpenAPI
	.venv/bin/python -m jobset_controller_dev.crdgen

rbac:  ## regenerate manifests/rbac and the chart's rules from controller/permissions.py
	.venv/bin/python -m jobset_controller_dev.rbacgen

release:  ## the release's files in dist/ (VERSION=vX.Y.Z, REGISTRY=where the image will live)
	hack/release.sh --version "$(VERSION)" --registry "$(or $(REGISTRY),localhost)"

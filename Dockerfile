# The controller image, one per architecture: `hack/image.sh --arch amd64,arm64` builds them with
# podman, with no image registry, no network and no emulation, and joins them in a manifest list.
#
#   BASE  the runtime for the image's platform: Python 3.11, its runtime libraries and CA
#         certificates, nothing else (no shell, apt, dpkg or perl). hack/image.sh cuts it from
#         Debian 12's packages (src/jobset_controller_dev/image/rootfs.py); Google's distroless
#         python3-debian12 has the same layout (/usr/bin/python3.11).
#   venv  a build context (`--build-context venv=DIR`): the product's virtual environment at
#         opt/jobset-controller, and bytecode for the base's standard library, assembled by
#         src/jobset_controller_dev/image/assemble.py in a container of THIS machine's runtime
#         (so an arm64 image is assembled on amd64 without emulating an instruction): the
#         dependencies' wheels for the image's platform, fetched on the host with
#         `pip download --platform`, unpacked; what no import reads removed; bytecode for the
#         modules the controller imports in a cluster (hack/image/cluster-modules.txt).
#
# No RUN step: the image is the base plus that one tree. No pip, no tests, no development tooling
# (`jobset_controller_dev` is not in the wheel).
ARG BASE=localhost/jobset-python:bookworm
FROM ${BASE}
COPY --from=venv / /
# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only in the shipped Deployment, and the
# modules a controller imports already have their bytecode.
ENV PATH=/opt/jobset-controller/bin:/usr/bin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Non-root, like upstream's distroless image (uid 65532, `nonroot` in the base's /etc/passwd).
USER 65532:65532
ENTRYPOINT ["/opt/jobset-controller/bin/jobset-controller", "run"]

# The controller image: `hack/image.sh` builds it on the development machines and in CI with
# podman, from a Debian base it makes with mmdebstrap (no image registry needed); the release
# process builds it from the default BASE. Any Debian-based image with Python >= 3.11 and its
# venv module works as BASE (python:3.12-slim; Debian 12's python3 + python3-venv).
#
# The product lives in a virtual environment at a fixed path, the same in both stages, so it
# works whichever layout the base's Python uses (Debian's pip puts `--prefix` installs under
# `local/`). The final stage holds the base, that venv and nothing else: no pip, no tests, no
# development tooling (`jobset_controller_dev` is not in the wheel).
#
# PIP_OPTIONS: extra options for the one `pip install`. Empty by default (PyPI); hack/image.sh
# passes `--no-index --find-links /wheels` with a directory of wheels it fetched on the host (from
# pip's cache) mounted there, so the build downloads nothing.
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
ARG PIP_OPTIONS=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python3 -m venv /opt/jobset-controller \
 && /opt/jobset-controller/bin/pip install --no-cache-dir --disable-pip-version-check \
      $PIP_OPTIONS . \
 && /opt/jobset-controller/bin/python -m pip uninstall --yes --quiet pip setuptools

FROM ${BASE}
COPY --from=build /opt/jobset-controller /opt/jobset-controller
ENV PATH=/opt/jobset-controller/bin:$PATH PYTHONUNBUFFERED=1
# Non-root, like upstream's distroless image (uid 65532).
USER 65532:65532
ENTRYPOINT ["/opt/jobset-controller/bin/jobset-controller", "run"]

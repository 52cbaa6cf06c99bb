# The controller image. Built and pushed by the release process; it cannot be built on the
# development machines (no container engine there), so `make test` does not build it.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.12-slim
COPY --from=build /install /usr/local
# Non-root, like upstream's distroless image (uid 65532).
USER 65532:65532
ENTRYPOINT ["jobset-controller", "run"]

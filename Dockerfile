# syntax=docker/dockerfile:1
# sunk-sandbox-operator image: a venv built in one stage, copied into a clean slim image.
#   docker build -t ghcr.io/sunksandbox/sunk-sandbox-operator:0.1.0 .
# tests/unit/test_dockerfile.py checks this file; tests/integration/test_image_build.py runs the builder's
# install step. The wheel holds sunk_sandbox_operator only (not operator/sunk_sandbox_devtools).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
# The user the final stage runs as, in passwd and group (as distroless' nonroot): kopf names the
# operator after getpass.getuser(), which fails for a uid that has no entry.
RUN echo "nonroot:x:65532:65532:sunk-sandbox-operator:/tmp:/usr/sbin/nologin" >> /etc/passwd \
 && echo "nonroot:x:65532:" >> /etc/group
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
# Runtime dependencies only: no [test] extras. The optional build secret `ca-bundle` replaces the
# CA bundle for this step only (a secret mount is never part of a layer, and this stage is not
# shipped): where the package index is reached through a TLS-inspecting proxy, pass the host's
#   --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt   (what `make image` does)
# Without it the step uses the base image's own bundle.
RUN --mount=type=secret,id=ca-bundle,target=/etc/ssl/certs/ca-certificates.crt,required=false \
    /opt/venv/bin/pip install --no-cache-dir .
# The shipped venv holds the product and its dependencies: no package manager.
RUN /opt/venv/bin/pip uninstall --yes --no-cache-dir pip setuptools

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="sunk-sandbox-operator" \
      org.opencontainers.image.description="Kubernetes operator that places CoreWeave sandboxes through the SUNK Pod Scheduler" \
      org.opencontainers.image.source="https://github.com/sunksandbox/sunk-sandbox-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    HOME=/tmp
COPY --from=builder /etc/passwd /etc/group /etc/
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["/opt/venv/bin/sunk-sandbox-operator"]
CMD ["run", "--standalone", "--all-namespaces"]

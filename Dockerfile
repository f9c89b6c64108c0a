# One image per binary of Runtime Watcher, from this one Dockerfile; `make
# images` builds them all (the Makefile's BINARIES):
#   make images IMAGE_PREFIX=runtime-watcher/ IMAGE_TAG=dev
# The build context is one folder holding the binary as "app": `make images`
# builds each binary static (CGO_ENABLED=0) for linux with Go's
# CMVP-certified FIPS 140-3 module (GOFIPS140=v1.0.0; fipsmode.Module) into
# bin/images/<binary>/, so no Go toolchain image is needed.
#
# BASE_IMAGE is the runtime base of test/kind/base.Dockerfile, assembled from
# Debian's packages by test/kind/base-image.sh (CA certificates, time zones,
# the user 65532; no shell): nothing is pulled from an image registry. The
# binary runs as user 65532 on a read-only root file system.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG BINARY
LABEL org.opencontainers.image.title="runtime-watcher/${BINARY}" \
      org.opencontainers.image.description="Runtime Watcher ${BINARY}"
COPY app /app
USER 65532:65532
ENTRYPOINT ["/app"]

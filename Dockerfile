# syntax=docker/dockerfile:1
#
# One image per binary of Runtime Watcher, from this one Dockerfile:
#   docker build --build-arg BINARY=ext-authz -t runtime-watcher/ext-authz:dev .
# BINARY is the binary's folder: ext-authz, skr-webhook, vs-controller,
# listener/example or module-sync (`make images` builds them all, see the Makefile's
# BINARIES). The binary is static (CGO_ENABLED=0) and runs as the distroless
# "nonroot" user (65532) on a read-only root file system.

ARG GO_VERSION=1.25
# Go's CMVP-certified FIPS 140-3 module (fipsmode.Module; FIPS mode on by
# default, no 32 MiB entropy scratch buffer; see package fipsmode).
ARG GOFIPS140=v1.0.0

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG BINARY
ARG GOFIPS140
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
RUN test -n "${BINARY}" || { echo "set --build-arg BINARY=<ext-authz|skr-webhook|vs-controller|listener/example|module-sync>" >&2; exit 1; }
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOFIPS140=${GOFIPS140} GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/app "./${BINARY}"

FROM gcr.io/distroless/static-debian12:nonroot
ARG BINARY
LABEL org.opencontainers.image.title="runtime-watcher/${BINARY}" \
      org.opencontainers.image.description="Runtime Watcher ${BINARY}"
COPY --from=build /out/app /app
USER 65532:65532
ENTRYPOINT ["/app"]

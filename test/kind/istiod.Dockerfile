# istiod for the kind e2e: the pilot-discovery that `make run` and `make
# test` run (istio.io/istio at the version test/tools/istio/go.mod pins),
# built static for linux by `make istiod-image`, which passes the folder of
# that binary as the build context:
#   make istiod-image ISTIOD_IMAGE=runtime-watcher/pilot:<version>
# Laid out like Istio's own pilot image (pilot/docker/Dockerfile.pilot of the
# same source): the binary at /usr/local/bin/pilot-discovery, its entrypoint,
# user 1337:1337, on the runtime base of the project's images (BASE_IMAGE,
# test/kind/base.Dockerfile; nothing pulled). Istio's istiod Helm chart passes the arguments
# ("discovery", ...) and sets readOnlyRootFilesystem and runAsNonRoot, which
# the numeric user satisfies.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY pilot-discovery /usr/local/bin/pilot-discovery
USER 1337:1337
ENTRYPOINT ["/usr/local/bin/pilot-discovery"]

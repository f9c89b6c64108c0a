# istiod for the kind e2e: the pilot-discovery binary that `make run` and
# `make test` run (istio.io/istio at the version test/tools/istio/go.mod pins,
# `make istio-assets`), as an image by `make istiod-image`:
#   make istiod-image ISTIOD_IMAGE=runtime-watcher/pilot:<version>
# Laid out like Istio's own pilot image (pilot/docker/Dockerfile.pilot of the
# same source): the binary at /usr/local/bin/pilot-discovery, its entrypoint,
# user 1337:1337. BASE_IMAGE is the Debian root file system of
# test/kind/rootfs.sh, whose glibc the binary is linked against; nothing is
# pulled. Istio's istiod Helm chart passes the arguments ("discovery", ...)
# and sets readOnlyRootFilesystem and runAsNonRoot, which the numeric user
# satisfies.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY pilot-discovery /usr/local/bin/pilot-discovery
USER 1337:1337
ENTRYPOINT ["/usr/local/bin/pilot-discovery"]

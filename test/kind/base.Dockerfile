# The runtime base of the project's images (the Dockerfile's BASE_IMAGE) and
# of istiod's (istiod.Dockerfile), in place of a minimal static base image: the
# files a static Go binary needs from Debian's packages — the CA bundle of
# ca-certificates, the time zones of tzdata — and the "nonroot" user 65532,
# nothing else: no shell, no package manager, and nothing written at run time
# (the manifests run every container with a read-only root). ROOTFS is a
# Debian root file system with those packages, built by test/kind/rootfs.sh;
# test/kind/base-image.sh builds this image from it. Nothing is pulled.
ARG ROOTFS
FROM ${ROOTFS} AS debian

FROM scratch
COPY --from=debian /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=debian /usr/share/zoneinfo /usr/share/zoneinfo
COPY passwd group /etc/
USER 65532:65532

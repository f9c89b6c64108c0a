#!/usr/bin/env bash
# node-image.sh: the kind node image of the kind e2e, built here with nothing
# pulled from an image registry (`make kind-node-image`). Prints its reference,
# kind.local/node:v<K8S_VERSION>-<key>, where <key> is the SHA-256 of every
# input (these scripts, versions.env, test/tools/k8s/go.sum, the node files
# in test/kind/node/): the same inputs reuse the image, or the archive of it
# in bin/kind/images/, instead of building it again.
#
# Laid out as kind's own node image (kind's base image's Dockerfile and files in
# the source of sigs.k8s.io/kind at KIND_VERSION, from the module proxy), on
# a Debian root file system (rootfs.sh):
# - systemd, containerd 2.x, runc, crictl, the CNI plugins (build-bins.sh);
#   containerd runs runc through test/kind/ocicapdrop, so privileged pods
#   start on hosts whose root lacks capabilities (engine.sh);
# - kubelet, kubeadm, kubectl of K8S_VERSION, and preloaded (never pulled):
#   kind.local/k8s/{kube-apiserver, kube-controller-manager, kube-scheduler,
#   kube-proxy, etcd, coredns, pause}, the names kubeadm gives its images
#   under the imageRepository "kind.local/k8s" the cluster configs set
#   (test/kind/kcp-cluster.yaml), and kind.local/k8s/kube-router;
# - the pod network: the bridge plugin (one node per cluster), and
#   NetworkPolicies enforced by kube-router's firewall, the DaemonSet kind
#   installs as its CNI manifest (test/kind/node/default-cni.yaml).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/test/kind"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"
K8S_VERSION="${K8S_VERSION:-$(sed -n 's/^K8S_VERSION *?= *//p' "$ROOT/Makefile")}"
BINS="$ROOT/bin/kind/bin"
WORK="$ROOT/bin/kind/node-build"
ARCHIVES="$ROOT/bin/kind/images"
REPO="kind.local/k8s"
ETCD_TAG="$(cd "$ROOT/test/tools/k8s" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
ETCD_TAG="${ETCD_TAG#v}-0"
PAUSE_TAG="$(sed -n 's/^[[:space:]]*PauseVersion = "\(.*\)"/\1/p' "$(cd "$ROOT/test/tools/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/cmd/kubeadm/app/constants/constants.go")"

log() { printf '==> node image: %s\n' "$*" >&2; }

key="$( (cat "$HERE/node-image.sh" "$HERE/build-bins.sh" "$HERE/rootfs.sh" "$HERE/versions.env" "$ROOT/test/tools/k8s/go.sum" "$HERE"/ocicapdrop/*.go && find "$HERE/node" -type f | sort | xargs cat) | sha256sum | cut -c1-12)"
NODE_IMAGE="kind.local/node:v$K8S_VERSION-$key"

if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
	log "$NODE_IMAGE: cached"
	echo "$NODE_IMAGE"
	exit 0
fi
if [[ -s "$ARCHIVES/node-$key.tar" ]]; then
	log "$NODE_IMAGE: loading bin/kind/images/node-$key.tar"
	docker load -i "$ARCHIVES/node-$key.tar" >&2
	echo "$NODE_IMAGE"
	exit 0
fi

log "[1/5] programs (build-bins.sh)"
"$HERE/build-bins.sh" containerd runc crictl cni coredns kube-router kubernetes pause ocicapdrop >&2
bin() { echo "$BINS/$1"; }
kube="$(bin "kubernetes-v$K8S_VERSION")"
ocicapdrop="$BINS/ocicapdrop-$(cat "$HERE"/ocicapdrop/*.go | sha256sum | cut -c1-12)"

log "[2/5] root file systems from Debian's packages (rootfs.sh)"
node_rootfs="$("$HERE/rootfs.sh" node)"
net_rootfs="$("$HERE/rootfs.sh" net)"

rm -rf "$WORK" && mkdir -p "$WORK"
# image NAME DOCKERFILE FILE...: docker build of NAME from DOCKERFILE's text,
# with FILE... in its context.
image() {
	local name="$1" dockerfile="$2" ctx
	shift 2
	ctx="$WORK/ctx-${name//[\/:]/_}"
	mkdir -p "$ctx"
	(($# == 0)) || cp -a "$@" "$ctx/"
	printf '%s\n' "$dockerfile" >"$ctx/Dockerfile"
	docker build -q -t "$name" "$ctx" >/dev/null
}

log "[3/5] the images kubeadm and kind start, into the node's containerd"
images=()
for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
	image "$REPO/$b:v$K8S_VERSION" "FROM $net_rootfs
COPY $b /usr/local/bin/$b" "$kube/$b"
	images+=("$REPO/$b:v$K8S_VERSION")
done
image "$REPO/etcd:$ETCD_TAG" "FROM $net_rootfs
COPY etcd /usr/local/bin/etcd" "$kube/etcd"
image "$REPO/coredns:$COREDNS_VERSION" "FROM $net_rootfs
COPY coredns /coredns
ENTRYPOINT [\"/coredns\"]" "$(bin "coredns-$COREDNS_VERSION")/coredns"
image "$REPO/pause:$PAUSE_TAG" "FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT [\"/pause\"]" "$(bin "pause-v$K8S_VERSION")/pause"
image "$REPO/kube-router:$KUBE_ROUTER_VERSION" "FROM $net_rootfs
COPY kube-router /usr/local/bin/kube-router
ENTRYPOINT [\"/usr/local/bin/kube-router\"]" "$(bin "kube-router-$KUBE_ROUTER_VERSION")/kube-router"
images+=("$REPO/etcd:$ETCD_TAG" "$REPO/coredns:$COREDNS_VERSION" "$REPO/pause:$PAUSE_TAG" "$REPO/kube-router:$KUBE_ROUTER_VERSION")
mkdir -p "$WORK/preload"
docker save -o "$WORK/preload/images.tar" "${images[@]}"

log "[4/5] the node's file system (kind $KIND_VERSION's base layout, $node_rootfs)"
kind_src="$(cd "$ROOT" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
ctx="$WORK/ctx-node"
mkdir -p "$ctx/bin" "$ctx/cni" "$ctx/kube"
cp -a "$kind_src/images/base/files" "$ctx/files"
chmod -R u+w "$ctx/files"
cp -a "$HERE/node" "$ctx/node"
cp "$(bin "containerd-$CONTAINERD_VERSION")"/{containerd,containerd-shim-runc-v2,ctr} "$(bin "crictl-$CRI_TOOLS_VERSION")/crictl" "$ctx/bin/"
cp "$(bin "runc-$RUNC_VERSION")/runc" "$ocicapdrop/ocicapdrop" "$ctx/bin/"
cp "$(bin "cni-plugins-$CNI_PLUGINS_VERSION")"/{bridge,loopback,ptp,host-local,portmap} "$ctx/cni/"
cp "$kube"/{kubelet,kubeadm,kubectl} "$ctx/kube/"
printf 'v%s\n' "$K8S_VERSION" >"$ctx/version"
# containerd's base spec for pods, as kind's base image makes it: ctr's default
# spec with kind's createContainer hook and no rlimits.
"$ctx/bin/ctr" oci spec |
	jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
	jq 'del(.process.rlimits)' >"$ctx/cri-base.json"
sed -e "s|@PAUSE@|$REPO/pause:$PAUSE_TAG|" "$HERE/node/containerd-config.toml" >"$ctx/config.toml"
sed -e "s|@KUBE_ROUTER_IMAGE@|$REPO/kube-router:$KUBE_ROUTER_VERSION|" "$HERE/node/default-cni.yaml" >"$ctx/default-cni.yaml"
cat >"$ctx/Dockerfile" <<EOF
FROM $node_rootfs
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \\
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \\
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
    && ln -sf /usr/lib/systemd/systemd /sbin/init \\
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
    && systemctl mask systemd-binfmt.service \\
    && mkdir -p /etc/kubernetes/manifests /opt/cni/bin /etc/cni/net.d /kind/manifests
COPY bin/containerd bin/containerd-shim-runc-v2 bin/ctr bin/crictl /usr/local/bin/
COPY bin/runc bin/ocicapdrop /usr/local/sbin/
COPY cni/ /opt/cni/bin/
COPY kube/ /usr/bin/
COPY cri-base.json config.toml /etc/containerd/
COPY node/containerd-service.conf /etc/systemd/system/containerd.service.d/10-ocicapdrop.conf
COPY node/10-bridge.conflist /etc/cni/net.d/
COPY default-cni.yaml /kind/manifests/default-cni.yaml
COPY version /kind/version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
docker build -q -t "$NODE_IMAGE-stage" "$ctx" >/dev/null

log "[5/5] preloading ${#images[@]} images into the node's containerd"
cid="$(docker run -d --privileged -v "$WORK/preload:/preload:ro" --entrypoint /bin/bash "$NODE_IMAGE-stage" -c \
	'containerd >/var/log/containerd-preload.log 2>&1 & for i in $(seq 60); do ctr version >/dev/null 2>&1 && break; sleep 1; done; ctr -n k8s.io images import --no-unpack --all-platforms /preload/images.tar && ctr -n k8s.io images ls -q && kill %1 && wait')"
if [[ "$(docker wait "$cid")" != 0 ]]; then
	docker logs "$cid" >&2
	docker rm -f "$cid" >/dev/null
	exit 1
fi
docker logs "$cid" >&2
# The stage's configuration (ENV, STOPSIGNAL) is kept; only the entrypoint
# of the preload run is undone.
docker commit \
	--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
	"$cid" "$NODE_IMAGE" >/dev/null
docker rm "$cid" >/dev/null
docker rmi "$NODE_IMAGE-stage" >/dev/null
mkdir -p "$ARCHIVES"
docker save -o "$ARCHIVES/node-$key.tar.tmp" "$NODE_IMAGE" && mv "$ARCHIVES/node-$key.tar.tmp" "$ARCHIVES/node-$key.tar"
log "$NODE_IMAGE built"
echo "$NODE_IMAGE"

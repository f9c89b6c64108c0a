#!/usr/bin/env bash
# build-bins.sh: every program the kind path runs, built from the Go module
# proxy's sources (and pause from k8s.io/kubernetes's C source) into
# bin/kind/bin/<part>-<version>/, each once: a part whose folder holds its
# .done marker is reused (the module proxy serves each version's source
# unchanged, so the version is the content key). Versions:
# test/kind/versions.env; Kubernetes and etcd: test/tools/k8s/go.mod at the
# Makefile's K8S_VERSION. A progress line per part; the build's output and
# /usr/bin/time -v figures in bin/kind/logs/<part>.log.
#
# build-bins.sh [PART...]   default: all parts
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$ROOT/test/kind/versions.env"
K8S_VERSION="${K8S_VERSION:-$(sed -n 's/^K8S_VERSION *?= *//p' "$ROOT/Makefile")}"
OUT="$ROOT/bin/kind/bin"
LOGS="$ROOT/bin/kind/logs"
export GOFLAGS="${GOFLAGS:-} -trimpath"

ALL=(kind helm containerd runc crictl cni coredns kube-router kubernetes pause ocicapdrop)

# part_dir PART: the folder of PART's binaries.
part_dir() {
	case "$1" in
	kind) echo "$OUT/kind-$KIND_VERSION" ;;
	helm) echo "$OUT/helm-$HELM_VERSION" ;;
	containerd) echo "$OUT/containerd-$CONTAINERD_VERSION" ;;
	runc) echo "$OUT/runc-$RUNC_VERSION" ;;
	crictl) echo "$OUT/crictl-$CRI_TOOLS_VERSION" ;;
	cni) echo "$OUT/cni-plugins-$CNI_PLUGINS_VERSION" ;;
	coredns) echo "$OUT/coredns-$COREDNS_VERSION" ;;
	kube-router) echo "$OUT/kube-router-$KUBE_ROUTER_VERSION" ;;
	kubernetes) echo "$OUT/kubernetes-v$K8S_VERSION" ;;
	pause) echo "$OUT/pause-v$K8S_VERSION" ;;
	# The repository's own program: keyed by its source.
	ocicapdrop) echo "$OUT/ocicapdrop-$(cat "$ROOT"/test/kind/ocicapdrop/*.go | sha256sum | cut -c1-12)" ;;
	*) return 1 ;;
	esac
}

# gobin DIR PKG@VERSION...: go install into DIR.
gobin() {
	local dir="$1"
	shift
	GOBIN="$dir" go install "$@"
}

# build_part PART DIR: the build of PART into DIR.
build_part() {
	local dir="$2" k8s
	case "$1" in
	kind) CGO_ENABLED=0 gobin "$dir" "sigs.k8s.io/kind@$KIND_VERSION" ;;
	helm) CGO_ENABLED=0 gobin "$dir" -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ;;
	containerd)
		CGO_ENABLED=0 gobin "$dir" -tags "no_aufs no_zfs no_btrfs no_devmapper" \
			-ldflags "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
		;;
	# seccomp through cgo and Debian's libseccomp (libseccomp-dev to build,
	# libseccomp2 in the node).
	runc)
		if [[ ! -e /usr/include/seccomp.h && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null
		fi
		CGO_ENABLED=1 gobin "$dir" -tags seccomp -ldflags "-X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
		;;
	crictl) CGO_ENABLED=0 gobin "$dir" -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION" ;;
	cni)
		local p pkgs=()
		for p in main/bridge main/loopback main/ptp ipam/host-local meta/portmap; do
			pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION")
		done
		CGO_ENABLED=0 gobin "$dir" "${pkgs[@]}"
		;;
	coredns) CGO_ENABLED=0 gobin "$dir" "github.com/coredns/coredns@$COREDNS_VERSION" ;;
	kube-router) CGO_ENABLED=0 gobin "$dir" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" ;;
	kubernetes)
		# The module and flags of `make envtest-assets` (test/tools/k8s; cgo
		# as there, so the packages its build compiled are reused, and the
		# binaries it built are copied): linked against Debian's glibc, they
		# run in the node and in images based on the node's root file system.
		k8s="$(make -s -C "$ROOT" --no-print-directory --eval 'print-ldflags: ; @echo $(call K8S_LDFLAGS,$(K8S_VERSION))' print-ldflags K8S_VERSION="$K8S_VERSION")"
		local b assets="$ROOT/bin/k8s/$K8S_VERSION"
		for b in kubelet kubeadm kube-scheduler kube-proxy kube-apiserver kube-controller-manager kubectl etcd; do
			if [[ -x "$assets/$b" ]]; then
				cp "$assets/$b" "$dir/$b"
			elif [[ "$b" == etcd ]]; then
				(cd "$ROOT/test/tools/k8s" && GOFLAGS= go build -o "$dir/$b" go.etcd.io/etcd/server/v3)
			else
				(cd "$ROOT/test/tools/k8s" && GOFLAGS= go build -ldflags "$k8s" -o "$dir/$b" "k8s.io/kubernetes/cmd/$b")
			fi
		done
		;;
	pause)
		local src
		src="$(cd "$ROOT/test/tools/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
		mkdir -p "$dir"
		cc -Os -Wall -Werror -static -DVERSION="v3.10.2-rw" -o "$dir/pause" "$src"
		;;
	ocicapdrop) (cd "$ROOT" && CGO_ENABLED=0 GOBIN="$dir" go install ./test/kind/ocicapdrop) ;;
	esac
}

main() {
	local parts=("$@") i=0 p dir start
	((${#parts[@]} > 0)) || parts=("${ALL[@]}")
	mkdir -p "$OUT" "$LOGS"
	for p in "${parts[@]}"; do
		i=$((i + 1))
		dir="$(part_dir "$p")" || {
			echo "build-bins.sh: unknown part $p (parts: ${ALL[*]})" >&2
			exit 2
		}
		if [[ -f "$dir/.done" ]]; then
			printf '==> [%d/%d] %s: cached in %s\n' "$i" "${#parts[@]}" "$p" "${dir#"$ROOT/"}"
			continue
		fi
		printf '==> [%d/%d] %s: building into %s (log: %s)\n' "$i" "${#parts[@]}" "$p" "${dir#"$ROOT/"}" "${LOGS#"$ROOT/"}/$p.log"
		start=$SECONDS
		rm -rf "$dir" && mkdir -p "$dir"
		export -f build_part gobin
		export ROOT KIND_VERSION HELM_VERSION CONTAINERD_VERSION RUNC_VERSION CRI_TOOLS_VERSION CNI_PLUGINS_VERSION COREDNS_VERSION KUBE_ROUTER_VERSION K8S_VERSION
		if ! /usr/bin/time -v bash -c 'set -euo pipefail; build_part "$0" "$1"' "$p" "$dir" >"$LOGS/$p.log" 2>&1; then
			tail -n 30 "$LOGS/$p.log" >&2
			echo "build-bins.sh: building $p failed (log: $LOGS/$p.log)" >&2
			exit 1
		fi
		touch "$dir/.done"
		printf '    %s built in %d s\n' "$p" $((SECONDS - start))
	done
}

main "$@"

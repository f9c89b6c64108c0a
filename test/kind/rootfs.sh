#!/usr/bin/env bash
# rootfs.sh NAME: the Debian root file system NAME from Debian's packages
# (debootstrap --variant=minbase of $KIND_DEBIAN_SUITE with NAME's packages),
# imported into the Docker engine as the image kind-rootfs/NAME:<key>, where
# <key> is the SHA-256 of the variant, the suite, the mirror and the
# package list: the same inputs reuse the archive cached in bin/kind/rootfs/ and the
# image. Prints the image reference. Nothing comes from an image registry.
#
# Environment (defaults from test/kind/versions.env):
#   KIND_DEBIAN_SUITE   the Debian release (bookworm)
#   KIND_DEBIAN_MIRROR  the Debian mirror (http://deb.debian.org/debian)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$ROOT/test/kind/versions.env"
SUITE="${KIND_DEBIAN_SUITE:-$DEBIAN_SUITE}"
MIRROR="${KIND_DEBIAN_MIRROR:-$DEBIAN_MIRROR}"
CACHE="$ROOT/bin/kind/rootfs"

# The root file systems and their packages beside minbase's:
# - node: a kind node, the packages kind's base image installs (sigs.k8s.io/kind's
#   images/base/Dockerfile) that the node image uses;
# - net: the control-plane, kube-proxy, kube-router and CoreDNS images
#   (glibc, iptables, ipset), and the source of the runtime base
#   (base.Dockerfile: CA certificates, time zones).
name="${1:-}"
case "$name" in
node) set -- systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz ca-certificates tzdata procps bash jq curl e2fsprogs ;;
net) set -- iptables ipset conntrack kmod iproute2 ca-certificates tzdata ;;
*)
	echo "usage: rootfs.sh node|net" >&2
	exit 2
	;;
esac
packages="$(printf '%s\n' "$@" | sort -u | paste -sd, -)"
key="$(printf '%s\n' minbase "$SUITE" "$MIRROR" "$packages" | sha256sum | cut -c1-16)"
image="kind-rootfs/$name:$key"
tar="$CACHE/$name-$key.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
	echo "$image"
	exit 0
fi
if [[ ! -s "$tar" ]]; then
	command -v debootstrap >/dev/null 2>&1 || {
		[[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || {
			echo "rootfs.sh: debootstrap is missing (Debian package debootstrap)" >&2
			exit 1
		}
		apt-get install -y -qq debootstrap >/dev/null
	}
	mkdir -p "$CACHE"
	dir="$(mktemp -d "$CACHE/.$name.XXXXXX")"
	trap 'rm -rf "$dir"' EXIT
	printf '==> rootfs %s: debootstrap %s %s (%s)\n' "$name" "$SUITE" "$packages" "$MIRROR" >&2
	debootstrap --variant=minbase ${packages:+--include="$packages"} "$SUITE" "$dir/root" "$MIRROR" >"$dir/debootstrap.log" 2>&1 || {
		tail -n 30 "$dir/debootstrap.log" >&2
		exit 1
	}
	# No package lists or downloaded .debs in the image.
	rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
	tar -C "$dir/root" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
fi
docker import --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$tar" "$image" >/dev/null
echo "$image"

#!/usr/bin/env bash
# base-image.sh: builds the runtime base of the project's images
# (test/kind/base.Dockerfile) from a Debian root file system (rootfs.sh) and
# prints its reference, kind.local/runtime-base:<key>; <key> is the SHA-256 of
# its inputs, so an unchanged base is reused. Nothing is pulled.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rootfs="$("$HERE/rootfs.sh" net)"
key="$( (cat "$HERE/base.Dockerfile" "${BASH_SOURCE[0]}" && echo "$rootfs") | sha256sum | cut -c1-12)"
image="kind.local/runtime-base:$key"
if ! docker image inspect "$image" >/dev/null 2>&1; then
	ctx="$(mktemp -d)"
	trap 'rm -rf "$ctx"' EXIT
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/group"
	printf '==> runtime base %s from %s\n' "$image" "$rootfs" >&2
	docker build -q --build-arg ROOTFS="$rootfs" -t "$image" -f "$HERE/base.Dockerfile" "$ctx" >/dev/null
fi
echo "$image"

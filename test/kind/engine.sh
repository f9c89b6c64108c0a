#!/usr/bin/env bash
# The container engine of the kind e2e (`make kind-engine`, run by .ci/run and
# by test/kind/e2e.sh): makes sure a Docker engine answers.
#
# - A Docker engine that answers (`docker info`; a developer's Docker, or
#   Podman's Docker-compatible socket through DOCKER_HOST) is used as is.
# - Otherwise, as root (CI): installs Debian's docker.io when dockerd is
#   missing (apt-get update, apt-get install docker.io) and starts dockerd in
#   the background (no systemd here), logging to $KIND_ENGINE_DIR/dockerd.log.
#   When root's capability bounding set lacks a capability (CAP_SYS_RESOURCE
#   on the machines CI runs on), every privileged container — each kind node
#   — fails in runc with "unable to apply caps: operation not permitted";
#   then dockerd gets test/kind/ocicapdrop, which removes what the host cannot
#   grant from each container's spec and runs runc, as its default runtime.
#
# Environment:
#   KIND_ENGINE_DIR  the wrapper binary and dockerd's log (default: bin/kind)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${KIND_ENGINE_DIR:-$ROOT/bin/kind}"
WRAPPER="$DIR/ocicapdrop"

log() { printf '==> engine: %s\n' "$*"; }
die() {
	printf 'engine: %s\n' "$*" >&2
	exit 1
}

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# bounding_lacks_caps: true when root's capability bounding set misses one of
# the capabilities a privileged container gets (bits 0-40).
bounding_lacks_caps() {
	local mask
	mask="$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)"
	(((0x$mask & 0x1ffffffffff) != 0x1ffffffffff))
}

# build_wrapper: test/kind/ocicapdrop, static, into $WRAPPER.
build_wrapper() {
	mkdir -p "$DIR"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$WRAPPER.tmp" ./test/kind/ocicapdrop) && mv "$WRAPPER.tmp" "$WRAPPER"
}

main() {
	if command -v docker >/dev/null 2>&1 && answers; then
		log "using the Docker engine that answers ($(docker info --format '{{.ServerVersion}} {{.DefaultRuntime}}'))"
		return 0
	fi
	[[ "$(id -u)" == 0 ]] || die "no Docker engine answers ('docker info'). Start your Docker or Podman (DOCKER_HOST=unix://\$XDG_RUNTIME_DIR/podman/podman.sock), or run as root to let this script install Debian's docker.io."
	if ! command -v dockerd >/dev/null 2>&1; then
		command -v apt-get >/dev/null 2>&1 || die "no Docker engine answers and there is no apt-get to install Debian's docker.io"
		log "installing Debian's docker.io"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
	fi
	local args=()
	if bounding_lacks_caps; then
		log "root's capability bounding set is $(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status): dockerd runs containers through test/kind/ocicapdrop"
		build_wrapper
		args+=(--add-runtime "ocicapdrop=$WRAPPER" --default-runtime ocicapdrop)
	fi
	mkdir -p "$DIR"
	log "starting dockerd ${args[*]} (log: $DIR/dockerd.log)"
	nohup dockerd "${args[@]}" >>"$DIR/dockerd.log" 2>&1 &
	local i
	for ((i = 0; i < 60; i++)); do
		if answers; then
			log "dockerd $(docker info --format '{{.ServerVersion}}, default runtime {{.DefaultRuntime}}') answers"
			return 0
		fi
		sleep 1
	done
	tail -n 20 "$DIR/dockerd.log" >&2
	die "dockerd did not answer within 60 s (log above: $DIR/dockerd.log)"
}

main "$@"

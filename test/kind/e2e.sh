#!/usr/bin/env bash
# The e2e suite on kind with real Istio and cert-manager (`make e2e-kind`).
#
# Two kind clusters on the Docker network "kind":
#   runtime-watcher-kcp  Istio (istiod and the ingress gateway, mesh config of
#                        manifests/istio), cert-manager, manifests/kcp/overlays/kind (ext-authz,
#                        vs-controller, Gateway, AuthorizationPolicy, PKI) and
#                        the example operator with the sample Watcher and Kyma;
#   runtime-watcher-skr  a plain runtime; vs-controller installs the skr-webhook
#                        bundle into it.
# Two clusters, not one with both roles, so that the SKR webhook's traffic
# really leaves its cluster and enters the KCP through the ingress gateway
# (mTLS, XFCC, ext_authz), and so that the SKR's admission webhook never sees
# the KCP's own objects.
#
# Then it runs the SAME e2e specs as `make e2e` (test/e2e) with E2E_ENV=kind.
#
# Nothing is pulled from an image registry: every image is built here from
# the Go module proxy's sources, the Python package index's Envoy and
# Debian's packages (docs/deploying.md, "Installing on kind"):
# - the kind node image (node-image.sh; both clusters run it, Kubernetes
#   K8S_VERSION of the Makefile: a second Kubernetes build for the SKR's
#   older minor would double the longest part of the build);
# - kind, helm (build-bins.sh) and kubectl (the node image's);
# - cert-manager: its controllers as test/cmcontrollers runs them
#   (test/kind/cert-manager, deployed by cert-manager.yaml);
# - Istio: the SAME istiod as `make run` and `make test` (pilot-discovery of
#   the istio.io/istio version test/tools/istio/go.mod pins, `make
#   istiod-image`), the gateway's proxy image from the same module's
#   pilot-agent and upstream Envoy of `make envoy-assets` (`make
#   istio-proxy-image`), installed with Istio's Helm charts from the same
#   module source (base, istiod, gateway);
# - the project's binaries (`make images`, on the runtime base).
#
# Tool and component versions: versions.env and test/tools/istio/go.mod.
# Environment:
#   E2E_KIND_NODE_IMAGE  a node image to use instead of building one
#   KIND, HELM           the kind and helm to run (default: built by
#                        build-bins.sh)
#   E2E_KIND_DIR      kubeconfigs and diagnostics (default: bin/kind-e2e)
#   E2E_KIND_REUSE=1  keep existing clusters of the same names instead of
#                     re-creating them (faster re-runs)
#   E2E_KIND_CLEANUP  on-success (default) | always | never: delete the clusters
#   E2E_TIMEOUT       go test -timeout (default 60m: CA rotation waits out
#                     vs-controller's 2 min --ca-settle per rotation, the
#                     kind-faults specs a Deployment's recovery per fault)
#   E2E_GO_TEST_FLAGS extra go test flags, e.g. "-ginkgo.focus=outage" (the
#                     suite runs with -v: Ginkgo's summary is in the output)
#                     (the `delivery` specs need the local environment's
#                     delivery controls, the `module-sync` specs its demo
#                     module manager; both are left out here; the
#                     `kind-faults` specs run only here: SUITE_LABELS)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/test/kind"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"

KCP_CONFIG="$HERE/kcp-cluster.yaml"
SKR_CONFIG="$HERE/skr-cluster.yaml"
KIND_OVERLAY="$ROOT/manifests/kcp/overlays/kind"
SAMPLES="$ROOT/manifests/samples"
# The image names the kind overlay and samples expect (their `images:`).
IMAGE_PREFIX="runtime-watcher/"
IMAGE_TAG="e2e"

WORK_DIR="${E2E_KIND_DIR:-$ROOT/bin/kind-e2e}"
REUSE="${E2E_KIND_REUSE:-0}"
CLEANUP="${E2E_KIND_CLEANUP:-on-success}"

log() { printf '\n==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
	printf 'e2e-kind: %s\n' "$*" >&2
	exit 1
}

# yaml_value FILE KEY: the first "KEY: value" in FILE (simple scalars only).
yaml_value() {
	sed -n "s|^[[:space:]]*$2:[[:space:]]*||p" "$1" | head -n1 | tr -d '"'
}

KCP_CLUSTER="$(yaml_value "$KCP_CONFIG" name)"
SKR_CLUSTER="$(yaml_value "$SKR_CONFIG" name)"
GATEWAY_HOST_PORT="$(yaml_value "$KCP_CONFIG" hostPort)"
GATEWAY_HOST="$(yaml_value "$KIND_OVERLAY/settings.yaml" gatewayHost)"
RUNTIME_ID="$(yaml_value "$SAMPLES/kyma.yaml" kyma-project.io/runtime-id)"
SKR_DOMAIN="$(yaml_value "$SAMPLES/kyma.yaml" skr-domain)"
KYMA_NS="kcp-system"

KUBECTL=""
NODE_IMAGE=""
# Set by resolve_istio: the pinned istio.io/istio version, its module source
# (charts) and the istiod image built from it.
ISTIO_VERSION=""
ISTIO_SRC=""
ISTIO_CHARTS=""
ISTIOD_IMAGE=""
ISTIO_PROXY_IMAGE=""
ENVOY_VERSION=""

check_prerequisites() {
	local missing=() out t v
	for t in go make; do
		command -v "$t" >/dev/null 2>&1 || missing+=("$t: not found in PATH")
	done
	if ! command -v docker >/dev/null 2>&1; then
		missing+=("docker: not found in PATH. Run 'make kind-engine' (as root it installs Debian's docker.io), or install Docker or Podman")
	elif ! out="$(docker info --format '{{.ServerVersion}}' 2>&1)"; then
		missing+=("docker: the Docker daemon is not reachable ('docker info' said: $(printf '%s' "$out" | tail -n1)). Run 'make kind-engine', start yours, or set DOCKER_HOST.")
	fi
	if ((${#missing[@]} > 0)); then
		printf 'e2e-kind: missing prerequisites (versions: test/kind/versions.env):\n' >&2
		printf '  - %s\n' "${missing[@]}" >&2
		exit 1
	fi
	if [[ -z "${KIND:-}" || -z "${HELM:-}" ]]; then
		log "kind $KIND_VERSION and helm $HELM_VERSION from the module proxy (build-bins.sh)"
		"$HERE/build-bins.sh" kind helm
	fi
	KIND="${KIND:-$ROOT/bin/kind/bin/kind-$KIND_VERSION/kind}"
	HELM="${HELM:-$ROOT/bin/kind/bin/helm-$HELM_VERSION/helm}"
	if [[ -n "${E2E_KIND_NODE_IMAGE:-}" ]]; then
		NODE_IMAGE="$E2E_KIND_NODE_IMAGE"
	else
		log "the kind node image (node-image.sh; cached by content)"
		NODE_IMAGE="$("$HERE/node-image.sh")"
	fi
	if command -v kubectl >/dev/null 2>&1; then
		KUBECTL="kubectl"
	else
		KUBECTL="$ROOT/bin/kind/bin/kubernetes-v${KUBECTL_VERSION#v}/kubectl"
		[[ -x "$KUBECTL" ]] || KUBECTL="$ROOT/bin/k8s/${KUBECTL_VERSION#v}/kubectl"
		[[ -x "$KUBECTL" ]] || die "kubectl $KUBECTL_VERSION: not in PATH nor built (node-image.sh builds it)"
	fi
	v="$("$KUBECTL" version --client 2>/dev/null | head -n1 || true)"
	[[ "$v" == *"$KUBECTL_VERSION"* ]] || warn "kubectl is '$v', the pinned version is $KUBECTL_VERSION"
	for v in KCP_CLUSTER SKR_CLUSTER GATEWAY_HOST_PORT GATEWAY_HOST RUNTIME_ID SKR_DOMAIN; do
		[[ -n "${!v}" ]] || die "could not read $v from the kind configs, the kind overlay or the samples"
	done
}

# resolve_istio: the istio.io/istio version test/tools/istio/go.mod pins and
# its source in the module cache (downloaded when missing), whose charts
# install the istiod built from it.
resolve_istio() {
	local d c
	read -r ISTIO_VERSION ISTIO_SRC < <(
		cd "$ROOT/test/tools/istio" &&
			go mod download istio.io/istio &&
			go list -m -f '{{.Version}} {{.Dir}}' istio.io/istio
	) || die "could not resolve istio.io/istio in test/tools/istio (go mod download)"
	[[ -n "$ISTIO_VERSION" && -d "$ISTIO_SRC" ]] || die "istio.io/istio of test/tools/istio/go.mod is not in the module cache (version '$ISTIO_VERSION', dir '$ISTIO_SRC')"
	ISTIO_CHARTS="$ISTIO_SRC/manifests/charts"
	for d in base istio-control/istio-discovery gateway; do
		c="$ISTIO_CHARTS/$d/Chart.yaml"
		[[ -f "$c" ]] || die "no Istio chart $c in the source of istio.io/istio $ISTIO_VERSION"
	done
	ISTIOD_IMAGE="${IMAGE_PREFIX}pilot:${ISTIO_VERSION}"
	ISTIO_PROXY_IMAGE="${IMAGE_PREFIX}proxyv2:${ISTIO_VERSION}"
	ENVOY_VERSION="$(sed -n 's/^ENVOY_VERSION *?= *//p' "$ROOT/Makefile")"
}

kcp() { "$KUBECTL" --kubeconfig "$WORK_DIR/kcp.kubeconfig" "$@"; }
skr() { "$KUBECTL" --kubeconfig "$WORK_DIR/skr.kubeconfig" "$@"; }

# retry ATTEMPTS DELAY CMD...: run CMD until it succeeds.
retry() {
	local attempts="$1" delay="$2" i
	shift 2
	for ((i = 1; i <= attempts; i++)); do
		if "$@"; then
			return 0
		fi
		((i < attempts)) && sleep "$delay"
	done
	return 1
}

create_cluster() {
	local name="$1" config="$2" image="$3"
	if "$KIND" get clusters 2>/dev/null | grep -qx "$name"; then
		if [[ "$REUSE" == 1 ]]; then
			log "reusing kind cluster $name (E2E_KIND_REUSE=1)"
			return 0
		fi
		log "deleting the existing kind cluster $name (E2E_KIND_REUSE=1 would keep it)"
		"$KIND" delete cluster --name "$name"
	fi
	log "creating kind cluster $name ($image)"
	"$KIND" create cluster --config "$config" --image "$image" --wait 5m
}

write_kubeconfigs() {
	mkdir -p "$WORK_DIR"
	(
		umask 077
		"$KIND" get kubeconfig --name "$KCP_CLUSTER" >"$WORK_DIR/kcp.kubeconfig"
		"$KIND" get kubeconfig --name "$SKR_CLUSTER" >"$WORK_DIR/skr.kubeconfig"
		# The SKR as the KCP's pods reach it (node container name on the
		# "kind" network): what vs-controller gets in kubeconfig-<runtime-id>.
		"$KIND" get kubeconfig --internal --name "$SKR_CLUSTER" >"$WORK_DIR/skr-internal.kubeconfig"
	)
}

install_cert_manager() {
	log "installing cert-manager $CERT_MANAGER_VERSION's controllers (runtime-watcher/cert-manager:$IMAGE_TAG, test/kind/cert-manager.yaml) into the KCP"
	kcp apply --server-side -f "$ROOT/manifests/crds/third_party/cert-manager.io_certificates.yaml" \
		-f "$ROOT/manifests/crds/third_party/cert-manager.io_certificaterequests.yaml" \
		-f "$ROOT/manifests/crds/third_party/cert-manager.io_issuers.yaml" \
		-f "$ROOT/manifests/crds/third_party/cert-manager.io_clusterissuers.yaml"
	kcp apply -f "$HERE/cert-manager.yaml"
	kcp -n cert-manager wait --for=condition=Available deployment --all --timeout=5m
}

# build_and_load_istio: istiod and the gateway's proxy image, built here.
build_and_load_istio() {
	log "building istiod $ISTIO_VERSION ($ISTIOD_IMAGE) and the gateway proxy ($ISTIO_PROXY_IMAGE) from source (test/tools/istio) and Envoy $ENVOY_VERSION"
	make -C "$ROOT" --no-print-directory istiod-image ISTIOD_IMAGE="$ISTIOD_IMAGE"
	make -C "$ROOT" --no-print-directory istio-proxy-image ISTIO_PROXY_IMAGE="$ISTIO_PROXY_IMAGE"
	"$KIND" load docker-image "$ISTIOD_IMAGE" "$ISTIO_PROXY_IMAGE" --name "$KCP_CLUSTER"
}

install_istio() {
	log "installing Istio into the KCP: istiod $ISTIO_VERSION ($ISTIOD_IMAGE), charts of its source, gateway proxy $ISTIO_PROXY_IMAGE (mesh config: manifests/istio)"
	local h=("$HELM" --kubeconfig "$WORK_DIR/kcp.kubeconfig" --namespace istio-system)
	"${h[@]}" upgrade --install istio-base "$ISTIO_CHARTS/base" \
		--create-namespace --set defaultRevision=default --wait
	# image: a full reference (it contains a "/") replaces hub/pilot:tag;
	# global.proxy.image likewise for the proxy istiod injects into the
	# gateway pods (the gateway chart's image "auto").
	"${h[@]}" upgrade --install istiod "$ISTIO_CHARTS/istio-control/istio-discovery" \
		-f "$ROOT/manifests/istio/istiod-values.yaml" \
		--set image="$ISTIOD_IMAGE" --set global.proxy.image="$ISTIO_PROXY_IMAGE" \
		-f "$HERE/istiod-kind-values.yaml" \
		--wait --timeout 5m
	"${h[@]}" upgrade --install istio-ingressgateway "$ISTIO_CHARTS/gateway" \
		-f "$HERE/istio-gateway-values.yaml" --wait --timeout 5m
	kcp -n istio-system rollout status deployment/istiod --timeout=5m
	kcp -n istio-system rollout status deployment/istio-ingressgateway --timeout=5m
}

install_crds() {
	log "installing the project's CRDs (manifests/crds: Watcher, SyncResource, ModuleGrant, ModuleConfig) and the Kyma stand-in CRD"
	kcp apply --server-side -f "$ROOT/manifests/crds/" -f "$ROOT/manifests/crds/kyma-standin/"
	kcp wait --for=condition=Established crd/watchers.operator.kyma-project.io crd/syncresources.operator.kyma-project.io crd/kymas.operator.kyma-project.io --timeout=1m
	# The SKR watches Kyma CRs (the sample Watcher's resourceToWatch).
	skr apply --server-side -f "$ROOT/manifests/crds/kyma-standin/"
	skr wait --for=condition=Established crd/kymas.operator.kyma-project.io --timeout=1m
}

build_and_load_images() {
	local binaries b img cluster
	# The binaries are the Makefile's BINARIES (one image each, `make images`).
	# shellcheck disable=SC2016 # $(BINARIES) is make's, not the shell's
	read -r -a binaries <<<"$(make -s -C "$ROOT" --no-print-directory --eval 'print-binaries: ; @echo $(BINARIES)' print-binaries)"
	((${#binaries[@]} > 0)) || die "no BINARIES in the Makefile"
	log "building images ${IMAGE_PREFIX}<binary>:$IMAGE_TAG for: ${binaries[*]} and cert-manager"
	make -C "$ROOT" --no-print-directory images IMAGE_PREFIX="$IMAGE_PREFIX" IMAGE_TAG="$IMAGE_TAG" \
		BINARIES="${binaries[*]} test/kind/cert-manager"
	for b in "${binaries[@]}" test/kind/cert-manager; do
		img="${IMAGE_PREFIX}$(basename "$b"):${IMAGE_TAG}"
		cluster="$KCP_CLUSTER"
		[[ "$b" == skr-webhook ]] && cluster="$SKR_CLUSTER"
		log "loading $img into $cluster"
		"$KIND" load docker-image "$img" --name "$cluster"
	done
}

deploy_kcp() {
	log "applying manifests/kcp/overlays/kind to the KCP"
	# cert-manager's webhook may refuse the issuers for a few seconds after
	# its Deployment is available.
	retry 30 5 kcp apply -k "$KIND_OVERLAY" || die "could not apply $KIND_OVERLAY"
	kcp -n kcp-system wait --for=condition=Ready certificate/runtime-watcher-ca --timeout=3m
	kcp -n istio-system wait --for=condition=Ready certificate/kcp-gateway-tls --timeout=3m
	kcp -n kcp-system rollout status deployment/ext-authz --timeout=5m
	kcp -n kcp-system rollout status deployment/vs-controller --timeout=5m
}

deploy_samples() {
	log "deploying the example operator, runtime $RUNTIME_ID (skr-domain $SKR_DOMAIN) and the sample Watcher"
	# The runtime's kubeconfig, as the KCP's pods reach the SKR; replaces the
	# placeholder of manifests/samples/kubeconfig-secret.yaml.
	kcp -n "$KYMA_NS" create secret generic "kubeconfig-$RUNTIME_ID" \
		--from-file=config="$WORK_DIR/skr-internal.kubeconfig" --dry-run=client -o yaml | kcp apply -f -
	kcp apply -k "$SAMPLES/example-operator"
	kcp -n "$KYMA_NS" rollout status deployment/example-operator --timeout=5m
	kcp apply -f "$SAMPLES/kyma.yaml" -f "$SAMPLES/watcher.yaml"
	log "waiting for vs-controller to install the skr-webhook into the SKR"
	retry 60 5 skr -n kyma-system get deployment/skr-webhook >/dev/null 2>&1 ||
		die "vs-controller did not create the skr-webhook Deployment in the SKR within 5 minutes"
	skr -n kyma-system rollout status deployment/skr-webhook --timeout=5m
}

# probe_reach NS IP PORT: whether the probe pod in NS opens a TCP connection
# to IP:PORT within 4 s.
probe_reach() {
	kcp -n "$1" exec probe -- timeout 4 bash -c "echo >/dev/tcp/$2/$3" >/dev/null 2>&1
}

# start_probes: the probe pods of the checks below, one in a namespace of
# its own and one in istio-system carrying the gateway's labels. They run
# the Debian root file system of rootfs.sh (bash's /dev/tcp; nothing
# pulled).
start_probes() {
	local probe
	probe="$("$HERE/rootfs.sh" net)"
	log "starting the probe pods (image $probe)"
	"$KIND" load docker-image "$probe" --name "$KCP_CLUSTER"
	kcp create namespace rw-np-probe --dry-run=client -o yaml | kcp apply -f -
	kcp -n rw-np-probe run probe --image="$probe" --image-pull-policy=Never --labels=app=probe --command -- sleep infinity
	kcp -n istio-system run probe --image="$probe" --image-pull-policy=Never --labels=istio=ingressgateway,app=probe --command -- sleep infinity
	kcp -n rw-np-probe wait --for=condition=Ready pod/probe --timeout=2m
	kcp -n istio-system wait --for=condition=Ready pod/probe --timeout=2m
}

stop_probes() {
	kcp delete namespace rw-np-probe --timeout=2m
	kcp -n istio-system delete pod probe --timeout=2m
}

# check_network_policies: what only a cluster shows — the NetworkPolicies of
# manifests/kcp and the example operator are enforced (kube-router's firewall
# in the node image). A pod in another namespace cannot open ext-authz's gRPC
# port, vs-controller's health-report port or the listener's events port (all
# trust identity headers only the gateway sets, so it cannot forge
# x-watcher-runtime-id either), but can open their metrics ports, which the policies leave
# open (so a refusal is the policy's, not an unreachable pod); a pod carrying
# the gateway's labels in istio-system can open both.
check_network_policies() {
	local ea vs op
	log "NetworkPolicies: probing ext-authz and vs-controller from another namespace and from the gateway's"
	ea="$(kcp -n kcp-system get pod -l app.kubernetes.io/name=ext-authz -o jsonpath='{.items[0].status.podIP}')"
	vs="$(kcp -n kcp-system get pod -l app.kubernetes.io/name=vs-controller -o jsonpath='{.items[0].status.podIP}')"
	op="$(kcp -n "$KYMA_NS" get pod -l app.kubernetes.io/name=example-operator -o jsonpath='{.items[0].status.podIP}')"
	probe_reach rw-np-probe "$ea" 8080 || die "NetworkPolicy check: ext-authz's metrics port is not reachable at all"
	probe_reach rw-np-probe "$vs" 8080 || die "NetworkPolicy check: vs-controller's metrics port is not reachable at all"
	probe_reach rw-np-probe "$op" 8080 || die "NetworkPolicy check: the listener's metrics port is not reachable at all"
	! probe_reach rw-np-probe "$ea" 9001 || die "NetworkPolicy not enforced: a pod in another namespace reached ext-authz's gRPC port"
	! probe_reach rw-np-probe "$vs" 8090 || die "NetworkPolicy not enforced: a pod in another namespace reached vs-controller's health-report port"
	! probe_reach rw-np-probe "$op" 8082 || die "NetworkPolicy not enforced: a pod in another namespace reached the listener's events port"
	probe_reach istio-system "$ea" 9001 || die "NetworkPolicy check: the gateway's pods cannot reach ext-authz's gRPC port"
	probe_reach istio-system "$vs" 8090 || die "NetworkPolicy check: the gateway's pods cannot reach vs-controller's health-report port"
	probe_reach istio-system "$op" 8082 || die "NetworkPolicy check: the gateway's pods cannot reach the listener's events port"
	log "NetworkPolicies enforced: other namespaces refused on ext-authz :9001, vs-controller :8090 and the listener :8082, the gateway admitted"
}

# probe_status NS IP PORT PATH: the HTTP status the probe pod in NS gets
# for GET PATH on IP:PORT within 4 s (empty when nothing answers).
probe_status() {
	kcp -n "$1" exec probe -- timeout 4 bash -c "exec 3<>/dev/tcp/$2/$3 && printf 'GET %s HTTP/1.0\r\n\r\n' '$4' >&3 && head -n1 <&3" 2>/dev/null | awk '{print $2}'
}

# check_gateway_status_port: the ingress gateway's pilot-agent serves its
# status port 15020 — readiness and the merged metrics Prometheus scrapes —
# without /debug/pprof (the injection template watcher-gateway of
# manifests/istio/istiod-values.yaml: --profiling=false), as seen by any
# pod of the cluster.
check_gateway_status_port() {
	local gw code
	gw="$(kcp -n istio-system get pod -l app=istio-ingressgateway -o jsonpath='{.items[0].status.podIP}')"
	log "the gateway's status port: probing $gw:15020 from another namespace"
	code="$(probe_status rw-np-probe "$gw" 15020 /healthz/ready)"
	[[ "$code" == 200 ]] || die "gateway status port check: /healthz/ready on $gw:15020 answered '$code', want 200"
	code="$(probe_status rw-np-probe "$gw" 15020 /stats/prometheus)"
	[[ "$code" == 200 ]] || die "gateway status port check: /stats/prometheus on $gw:15020 answered '$code', want 200"
	code="$(probe_status rw-np-probe "$gw" 15020 /debug/pprof/)"
	[[ "$code" == 404 ]] || die "the gateway serves /debug/pprof: $gw:15020 answered '$code', want 404"
	log "the gateway's status port serves readiness and metrics, no /debug/pprof"
}

# check_drain_honours_pdbs: a node drain evicts the example operator's pods
# only as far as its PodDisruptionBudget allows (minAvailable 1 of 2): with
# the one node cordoned no replacement can start, so the second eviction must
# be refused and the drain time out. The node is uncordoned afterwards.
check_drain_honours_pdbs() {
	local node out
	node="$KCP_CLUSTER-control-plane"
	log "draining $node: the PodDisruptionBudget of the example operator must stop it"
	if out="$(kcp drain "$node" --ignore-daemonsets --delete-emptydir-data \
		--pod-selector=app.kubernetes.io/name=example-operator --timeout=30s 2>&1)"; then
		kcp uncordon "$node"
		die "the drain evicted every example-operator pod despite its PodDisruptionBudget:
$out"
	fi
	kcp uncordon "$node"
	[[ "$out" == *"violate the pod's disruption budget"* ]] || die "the drain failed, but not on the PodDisruptionBudget:
$out"
	kcp -n "$KYMA_NS" rollout status deployment/example-operator --timeout=3m
	log "the drain honoured the PodDisruptionBudget"
}

# owned_runtimes: the sum over vs-controller's running pods of
# runtime_watcher_shard_owned_runtimes (read through the API server's pod
# proxy from the metrics port).
owned_runtimes() {
	local total=0 pod v
	for pod in $(kcp -n kcp-system get pod -l app.kubernetes.io/name=vs-controller --field-selector=status.phase=Running -o jsonpath='{.items[*].metadata.name}'); do
		v="$(kcp get --raw "/api/v1/namespaces/kcp-system/pods/$pod:8080/proxy/metrics" | sed -n 's/^runtime_watcher_shard_owned_runtimes{[^}]*} //p')"
		total=$((total + ${v:-0}))
	done
	echo "$total"
}

# owned_is N: whether vs-controller's members own N runtimes in all.
owned_is() { [[ "$(owned_runtimes)" == "$1" ]]; }

# vs_pods_are N: whether exactly N vs-controller pods exist (none still
# terminating, whose metrics would count).
vs_pods_are() { [[ "$(kcp -n kcp-system get pod -l app.kubernetes.io/name=vs-controller --no-headers | wc -l)" == "$1" ]]; }

# check_shards_keep_runtimes_owned: vs-controller (shard Leases) scaled
# 3 -> 1 -> 3 keeps every runtime owned by exactly one member: after each
# step its members' owned_runtimes add up to the number of Kyma CRs.
check_shards_keep_runtimes_owned() {
	local n want
	want="$(kcp -n "$KYMA_NS" get kymas.operator.kyma-project.io --no-headers | wc -l)"
	for n in 3 1 3; do
		log "vs-controller scaled to $n: its members must own all $want runtimes"
		kcp -n kcp-system scale deployment/vs-controller --replicas="$n"
		kcp -n kcp-system rollout status deployment/vs-controller --timeout=3m
		retry 90 2 vs_pods_are "$n" || die "vs-controller did not settle at $n pods"
		retry 60 2 owned_is "$want" || die "vs-controller at $n replicas owns $(owned_runtimes) of $want runtimes"
	done
	kcp -n kcp-system scale deployment/vs-controller --replicas=1
}

# SUITE_LABELS: the specs run here. kind-faults: those only a cluster can
# run (pods deleted and restarted, labelled kind-only as well, which the
# local suite leaves out); and every spec but those that need the local
# environment's controls (delivery, takeover, silent, shards, module-sync's
# demo module manager, fairness's low-limit class, kyma-listener's operator on
# Kyma's listener as a process) or its loopback Envoy's admin API (istio,
# edge, adversary).
SUITE_LABELS='kind-faults || (!delivery && !module-sync && !takeover && !silent && !shards && !istio && !edge && !adversary && !fairness && !kyma-listener)'

run_suite() {
	log "running the e2e suite (E2E_ENV=kind) through the Istio ingress gateway at 127.0.0.1:$GATEWAY_HOST_PORT"
	cd "$ROOT"
	# shellcheck disable=SC2086 # E2E_GO_TEST_FLAGS is a list of flags
	E2E_ENV=kind \
		KCP_KUBECONFIG="$WORK_DIR/kcp.kubeconfig" \
		SKR_KUBECONFIG="$WORK_DIR/skr.kubeconfig" \
		GATEWAY_ADDR="127.0.0.1:$GATEWAY_HOST_PORT" \
		GATEWAY_HOST="$GATEWAY_HOST" \
		CA_SECRET="kcp-system/runtime-watcher-ca" \
		INGRESS_NAMESPACE="istio-system" \
		INGRESS_DEPLOYMENT="istio-ingressgateway" \
		OPERATOR_NAMESPACE="$KYMA_NS" \
		OPERATOR_SELECTOR="app.kubernetes.io/name=example-operator" \
		KYMA_NAMESPACE="$KYMA_NS" \
		RUNTIME_ID="$RUNTIME_ID" \
		SKR_DOMAIN="$SKR_DOMAIN" \
		EXT_AUTHZ_DEPLOYMENT="kcp-system/ext-authz" \
		VS_CONTROLLER_DEPLOYMENT="kcp-system/vs-controller" \
		OPERATOR_DEPLOYMENT="$KYMA_NS/example-operator" \
		WEBHOOK_DEPLOYMENT="kyma-system/skr-webhook" \
		go test -count=1 -timeout "${E2E_TIMEOUT:-60m}" ./test/e2e/... -v -ginkgo.label-filter="$SUITE_LABELS" -ginkgo.fail-on-empty ${E2E_GO_TEST_FLAGS:-}
}

# collect_diagnostics: what is needed to understand a failure, in
# $WORK_DIR/diagnostics.
collect_diagnostics() {
	local d="$WORK_DIR/diagnostics"
	[[ -s "$WORK_DIR/kcp.kubeconfig" ]] || return 0
	mkdir -p "$d"
	kcp get pods,deployments,services -A -o wide >"$d/kcp-workloads.txt" 2>&1 || true
	kcp get events -A --sort-by=.lastTimestamp >"$d/kcp-events.txt" 2>&1 || true
	# Every replica's log (the kind-faults specs delete and restart pods).
	kcp get gateways.networking.istio.io,virtualservices.networking.istio.io,authorizationpolicies.security.istio.io,certificates.cert-manager.io,watchers.operator.kyma-project.io,kymas.operator.kyma-project.io -A -o yaml >"$d/kcp-objects.yaml" 2>&1 || true
	kcp -n kcp-system logs -l app.kubernetes.io/name=ext-authz --prefix --tail=500 >"$d/ext-authz.log" 2>&1 || true
	kcp -n kcp-system logs -l app.kubernetes.io/name=vs-controller --prefix --tail=500 >"$d/vs-controller.log" 2>&1 || true
	kcp -n kcp-system logs -l app.kubernetes.io/name=example-operator --prefix --tail=500 >"$d/example-operator.log" 2>&1 || true
	kcp -n istio-system logs deployment/istio-ingressgateway --tail=500 >"$d/istio-ingressgateway.log" 2>&1 || true
	kcp -n istio-system logs deployment/istiod --tail=500 >"$d/istiod.log" 2>&1 || true
	if [[ -s "$WORK_DIR/skr.kubeconfig" ]]; then
		skr get pods,deployments,validatingwebhookconfigurations -A -o wide >"$d/skr-workloads.txt" 2>&1 || true
		skr get events -A --sort-by=.lastTimestamp >"$d/skr-events.txt" 2>&1 || true
		skr -n kyma-system logs -l app.kubernetes.io/name=skr-webhook --prefix --tail=500 >"$d/skr-webhook.log" 2>&1 || true
	fi
	printf 'e2e-kind: diagnostics (pods, events, objects, logs) are in %s\n' "$d" >&2
}

on_exit() {
	local status=$? delete=0
	((status == 0)) || collect_diagnostics
	case "$CLEANUP" in
	always) delete=1 ;;
	on-success) ((status != 0)) || delete=1 ;;
	esac
	if ((delete)); then
		log "deleting the kind clusters"
		"$KIND" delete cluster --name "$KCP_CLUSTER" || true
		"$KIND" delete cluster --name "$SKR_CLUSTER" || true
	else
		printf '\ne2e-kind: clusters kept. Inspect them with\n  kubectl --kubeconfig %s ...\n  kubectl --kubeconfig %s ...\nand delete them with\n  kind delete cluster --name %s; kind delete cluster --name %s\n' \
			"$WORK_DIR/kcp.kubeconfig" "$WORK_DIR/skr.kubeconfig" "$KCP_CLUSTER" "$SKR_CLUSTER" >&2
	fi
}

main() {
	check_prerequisites
	resolve_istio
	case "$CLEANUP" in always | on-success | never) ;; *) die "E2E_KIND_CLEANUP=$CLEANUP: want on-success, always or never" ;; esac
	trap on_exit EXIT
	create_cluster "$KCP_CLUSTER" "$KCP_CONFIG" "$NODE_IMAGE"
	create_cluster "$SKR_CLUSTER" "$SKR_CONFIG" "$NODE_IMAGE"
	write_kubeconfigs
	build_and_load_images
	install_cert_manager
	build_and_load_istio
	install_istio
	install_crds
	deploy_kcp
	deploy_samples
	start_probes
	check_network_policies
	check_gateway_status_port
	stop_probes
	run_suite
	check_drain_honours_pdbs
	check_shards_keep_runtimes_owned
	log "e2e on kind passed"
}

main "$@"

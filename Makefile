# bridgehead: see README.md.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
OUT       ?= out

.PHONY: all build demo test test-short fuzz vet fmt clean deps bench deb image image-test image-deps kube-testenv cni-plugins umoci container generate \
	crane push cluster cluster-down cluster-build cluster-deps cluster-test conformance

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bridgehead ./cmd/bridgehead
	$(GO) build -trimpath -o $(BIN)/bhprobe ./cmd/bhprobe

# deps installs, on a fresh Debian machine (root), every tool that make test,
# make demo and make bench use, so that no test skips for a missing one:
#   ip (iproute2)             the lab's namespaces, veths and routes
#   nft (nftables)            the HA lab's one-way path test (TestHAPartialFailure)
#   curl                      the relay end-to-end test (curl --proxy)
#   iperf3                    the benchmark harness
#   dnsmasq (dnsmasq-base)    the cluster DNS of the verify end-to-end test (no service)
#   lintian, dpkg-deb (dpkg)  TestBuildDeb
#   packer                    TestPackerValidate (Debian's 1.6 has azure-arm built in)
#   keepalived                TestKeepalivedConfig
#   systemd-analyze (systemd) TestUnitVerify
#   setpriv (util-linux)      the CLI test that drops a capability
#   ethtool                   the tun test that turns a veth's checksum offload off
#   iptables-legacy (iptables) the node agent's FORWARD check of legacy iptables chains
#   chromium                  TestMesh loads the gateway's /mesh page headless (DOM, screenshot)
# and then the Go modules. One apt-get run installs whatever is missing.
DEPS := ip:iproute2 nft:nftables curl:curl iperf3:iperf3 dnsmasq:dnsmasq-base \
	lintian:lintian dpkg-deb:dpkg packer:packer keepalived:keepalived \
	systemd-analyze:systemd setpriv:util-linux ethtool:ethtool iptables-legacy:iptables \
	chromium:chromium
deps:
	@need=; for c in $(DEPS); do command -v "$${c%%:*}" >/dev/null 2>&1 || need="$$need $${c#*:}"; done; \
	  if [ -n "$$need" ]; then \
	    echo "make deps: installing$$need"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need; \
	  fi
	$(GO) mod download

# demo: a two-site lab in network namespaces (root).
demo: deps build
	deploy/lab/demo.sh

# diagram renders docs/architecture.svg from docs/architecture.dot with
# Graphviz's dot (apt-get install graphviz; deliberately not in deps). The
# SVG carries its source's sha256, so TestArchitectureSVG fails when the
# .dot changed without a new rendering, and CI needs no Graphviz.
.PHONY: diagram
diagram:
	sum=$$(sha256sum docs/architecture.dot | cut -d' ' -f1) && \
	dot -Tsvg docs/architecture.dot | sed "1a <!-- source: docs/architecture.dot sha256:$$sum -->" > docs/architecture.svg.tmp && \
	mv docs/architecture.svg.tmp docs/architecture.svg

# reference: regenerate docs/reference (CLI, config, CRDs, metrics, logs)
# from the code. Without -update the same tests fail when a page is stale.
.PHONY: reference
reference:
	$(GO) test ./cmd/bridgehead -run TestReference -count=1 -update
	$(GO) test ./internal/docgen -run TestReference -count=1 -update

# generate: deepcopy and the CRDs of the bridgehead.io API (kube/apis) by
# controller-gen, pinned here; TestGeneratedUpToDate (kube/apis/v1alpha1)
# runs the same two commands into a temporary directory and diffs.
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
generate:
	$(CONTROLLER_GEN) object paths=./kube/apis/...
	$(CONTROLLER_GEN) crd paths=./kube/apis/... output:crd:artifacts:config=deploy/kubernetes/crds

# kube-testenv: the real kube-apiserver (v1.37.2) and etcd (v3.6.16) that the
# Kubernetes tests start, built from the Go module proxy into
# KUBE_TESTENV_DIR once (hack/kube-testenv/build.sh; a no-op when built).
KUBE_TESTENV_DIR ?= $(HOME)/.cache/bridgehead/kube-testenv
export KUBE_TESTENV_DIR
kube-testenv:
	hack/kube-testenv/build.sh $(KUBE_TESTENV_DIR)

# cni-plugins: the CNI reference plugins (v1.10.0: bridge, host-local,
# portmap, loopback) that the node tests invoke and the container image ships,
# built from the Go module proxy into CNI_PLUGINS_DIR once.
CNI_PLUGINS_DIR ?= $(HOME)/.cache/bridgehead/cni-plugins
export CNI_PLUGINS_DIR
cni-plugins:
	hack/cni-plugins/build.sh $(CNI_PLUGINS_DIR)

# umoci: umoci v0.6.0, which writes the container image without a container
# engine, built from the Go module proxy into UMOCI_DIR once
# (hack/umoci/build.sh; a no-op when built).
UMOCI_DIR ?= $(HOME)/.cache/bridgehead/umoci
export UMOCI_DIR
umoci:
	hack/umoci/build.sh $(UMOCI_DIR)

# container: the container image (the static binary and the CNI plugins) as
# an OCI archive, $(OUT)/bridgehead-oci.tar, with .digest and .ref beside it;
# reproducible (deploy/container/build.sh). Into a registry: make push below.
IMAGE ?= ghcr.io/bridgehead/bridgehead
container: umoci cni-plugins
	deploy/container/build.sh -u $(UMOCI_DIR)/umoci -c $(CNI_PLUGINS_DIR) -o $(OUT) -n $(IMAGE)

# crane: crane v0.22.1 (go-containerregistry), which copies the image into a
# registry, built from the Go module proxy into CRANE_DIR once
# (hack/crane/build.sh; a no-op when built).
CRANE_DIR ?= $(HOME)/.cache/bridgehead/crane
export CRANE_DIR
crane:
	hack/crane/build.sh $(CRANE_DIR)

# push: the image of make container into REGISTRY (host[:port][/path]) as
# REGISTRY/bridgehead:TAG, checked against the archive's digest, then the
# kustomize images: lines that pin it (stdout) for an overlay
# (deploy/container/push.sh; log in with crane auth login first).
push: crane container
	@test -n "$(REGISTRY)" || { echo "make push: REGISTRY=host[:port][/path] is required" >&2; exit 2; }
	deploy/container/push.sh -c $(CRANE_DIR)/crane -a $(OUT)/bridgehead-oci.tar -r $(REGISTRY) -k $(IMAGE)

# cluster: a real two-site Kubernetes cluster on this machine (root), left
# running: the control plane in site A, kubelet, containerd and kube-proxy
# per node, each node its own network and mount namespace, bridgehead
# installed as docs/getting-started/aks.md tells an operator (deploy/lab/cluster.sh;
# docs/getting-started/cluster.md). The admin kubeconfig is $(CLUSTER_STATE)/kubeconfig;
# a node's shell: deploy/lab/cluster.sh shell $(CLUSTER_STATE) a1.
# A second make cluster replaces the running one; make cluster-down
# removes everything it started.
CLUSTER_DIR ?= $(HOME)/.cache/bridgehead/cluster
CLUSTER_STATE ?= $(OUT)/cluster
export CLUSTER_DIR
# cluster-deps: what the cluster's nodes and images need from Debian:
#   libseccomp-dev, pkg-config  runc, built with cgo (hack/cluster/build.sh)
#   debootstrap               the Debian layer of the e2e images (hack/cluster/images.sh)
#   openssl                   the cluster's certificates
#   nsenter, unshare (util-linux)  a node's mount namespace
CLUSTER_DEPS := pkg-config:pkg-config debootstrap:debootstrap openssl:openssl nsenter:util-linux
CLUSTER_LIBS := libseccomp-dev
cluster-deps:
	@need=; for c in $(CLUSTER_DEPS); do command -v "$${c%%:*}" >/dev/null 2>&1 || need="$$need $${c#*:}"; done; \
	  for p in $(CLUSTER_LIBS); do dpkg -s "$$p" >/dev/null 2>&1 || need="$$need $$p"; done; \
	  if [ -n "$$need" ]; then \
	    echo "make cluster-deps: installing$$need"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need; \
	  fi
# cluster-build: kubelet, kube-proxy, the scheduler, the controller manager,
# kubectl, containerd, CoreDNS and agnhost from the Go module proxy
# (hack/cluster/build.sh), and the images the nodes import
# (hack/cluster/images.sh), cached in CLUSTER_DIR; a no-op when built.
cluster-build: cluster-deps kube-testenv umoci
	hack/cluster/build.sh $(CLUSTER_DIR)
	hack/cluster/images.sh $(UMOCI_DIR)/umoci $(CLUSTER_DIR)
cluster: deps build cluster-build container
	deploy/lab/cluster.sh down $(CLUSTER_STATE)
	CLUSTER_BIN=$(CLUSTER_DIR)/bin IMAGES=$(CLUSTER_DIR)/images BRIDGEHEAD_IMAGE=$(abspath $(OUT))/bridgehead-oci.tar \
	  deploy/lab/cluster.sh up $(CLUSTER_STATE)
cluster-down:
	deploy/lab/cluster.sh down $(CLUSTER_STATE)

# conformance: the upstream sig-network conformance tests (e2e.test and
# ginkgo built from the cluster's own k8s.io/kubernetes) against a fresh
# cluster, which is left running; report in $(OUT)/conformance
# (hack/cluster/conformance.sh; FOCUS=... SKIP=... for another set).
conformance: cluster
	hack/cluster/build.sh $(CLUSTER_DIR) conformance
	hack/cluster/conformance.sh $(CLUSTER_STATE) $(OUT)/conformance

# cluster-test: a fresh cluster, the tests of e2e/cluster against it (nodes
# Ready through the DaemonSet, pod to pod within and across sites with
# the source address kept, Services and NodePorts across sites, DNS,
# egress, logs/exec/port-forward across sites, the node agent restarted,
# the verify Job passing and failing the check of each broken piece),
# then the cluster removed whatever the result.
cluster-test: cluster
	$(GO) test -tags cluster -count=1 -timeout 20m -v ./e2e/cluster -args -state $(abspath $(CLUSTER_STATE)); \
	  rc=$$?; deploy/lab/cluster.sh down $(CLUSTER_STATE); exit $$rc

# test: every test, root-only ones included (CI runs as root), with -race.
# umoci and cni-plugins: deploy/container builds the image twice; crane:
# deploy/container pushes an image into a registry on 127.0.0.1. -timeout is
# per package: e2e alone ran 726 s in a clean-clone CI run before the node
# agent and seed-check labs (each 1.5-3 min) joined it, so 20m was too near.
test: deps build kube-testenv cni-plugins umoci crane
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 40m ./...

# test-short: unit tests only (no namespaces, no TUN), fast.
test-short:
	$(GO) test -short -count=1 ./...

# fuzz: each fuzz target for FUZZTIME (default 1m).
FUZZTIME ?= 1m
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# bench: benchmark harness (root): kernel, bridgehead (each cipher) and, when
# installed, wireguard-go; 3 interleaved runs of 10 s. BENCHFLAGS=--quick for a smoke run.
BENCHFLAGS ?=
bench: deps build
	$(GO) run ./bench/cmd/bhbench $(BENCHFLAGS)

# deb: the Debian package (deploy/package/build-deb.sh; go build of
# ./cmd/bridgehead inside), checked with lintian when it is installed.
deb:
	@deb=$$(deploy/package/build-deb.sh -o $(OUT)) && echo "$$deb" && \
	  if command -v lintian >/dev/null; then lintian --fail-on error,warning "$$deb"; fi

# image-deps: the Debian packages that image and image-test need (root).
image-deps:
	deploy/image/deps.sh

# image: the gateway disk image (root): $(OUT)/image/bridgehead.{qcow2,vhd}.
# The Debian base is cached in $(OUT)/image-cache; an unchanged package
# and overlay make it a no-op.
# After a successful build from committed inputs, it records their hash in
# .ci/image-built (commit it with the change): .ci/run builds the image only
# when its inputs differ from that record (hack/image/inputs.sh says which).
IMAGE_INPUTS := deploy/image deploy/package deploy/systemd deploy/build-common.sh go.mod go.sum
image: image-deps
	deb=$$(deploy/package/build-deb.sh -o $(OUT)) && \
	  deploy/image/build-image.sh -d "$$deb" -o $(OUT)/image -c $(OUT)/image-cache
	@if git diff --quiet HEAD -- $(IMAGE_INPUTS); then \
	  hack/image/inputs.sh >.ci/image-built; echo "make image: recorded inputs $$(cat .ci/image-built) in .ci/image-built"; \
	else echo "make image: inputs have uncommitted changes; .ci/image-built not updated"; fi

# image-test: boot two gateway VMs from the image under QEMU/KVM (root).
image-test: image
	deploy/image/boot-test.sh $(OUT)/image/bridgehead.qcow2

clean:
	rm -rf $(BIN)

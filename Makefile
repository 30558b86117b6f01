# Cloister. `make demo` and `make test` are the two commands of the README;
# every target first makes sure the pinned Kubernetes toolchain is built
# (cold: minutes; warm: instant, reused from .cache/k8s/<version>/bin).

GO      ?= go
BIN     := bin
# Computed once per make run (:=): a recursive ?= asked git again at each
# use, so a tree edited mid-build gave the binaries and images two versions.
ifndef VERSION
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
endif
ifndef COMMIT
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
endif
LDFLAGS := -X github.com/cloister-cc/cloister/internal/base/version.Version=$(VERSION) \
           -X github.com/cloister-cc/cloister/internal/base/version.Commit=$(COMMIT)
CLOISTER := $(BIN)/cloister
CACHE   := $(or $(CLOISTER_CACHE_DIR),.cache)
# One build configuration (toolchain.BuildEnv and BuildFlags: no cgo,
# -trimpath) for every go build and go run of Cloister's code here, so Go's
# build cache compiles each package once: hack/gobuild builds in it, and
# GORUN runs in it.
GORUN   := CGO_ENABLED=0 $(GO) run -trimpath
# golangci-lint type-checks against compiled dependencies (go list -export):
# in the same configuration, they are the ones make's builds compiled.
LINTENV := CGO_ENABLED=0 GOFLAGS=-trimpath
# make's own cloister (the toolchain, dev cluster and lint commands), built
# by the bootstrap below; bin/cloister is make build's, with its pins.
GOBUILD := $(CACHE)/bin/gobuild
MAKE_CLOISTER := $(CACHE)/bin/cloister
# Where make images writes (cloister dev up --real-node imports from there).
IMAGES  := $(or $(CLOISTER_CACHE_DIR),.cache)/images
# Also in config/crd's staleness test: keep the two in step.
CONTROLLER_GEN_ARGS := object paths=./api/... crd:maxDescLen=400 paths=./api/... \
                       output:crd:artifacts:config=charts/cloister-operator/files/crds \
                       rbac:roleName=cloister-operator paths=./internal/... \
                       output:rbac:artifacts:config=charts/cloister-operator/files/rbac
# The kata agent policy's tests: a module of their own, so that OPA, which
# evaluates the policies there, links into no binary.
AGENTPOLICY := test/agentpolicy
# The platforms of the images: host (the default, all make build, make demo
# and make test need), all (linux/amd64, linux/arm64 and linux/s390x: a
# release, make images PLATFORMS=all), or a comma-separated list. Each
# platform's binaries go into bin/OS_ARCH (the host's into bin), cross-compiled.
PLATFORMS ?= host
IMAGE_FLAGS = -bin $(BIN) -version $(VERSION) -revision $(COMMIT) -platforms '$(PLATFORMS)'
# $(call build-each,PACKAGES,LDFLAGS,SKIP): go build for every platform into
# its folder of bin, but the folder SKIP.
build-each = $(GORUN) ./hack/images $(IMAGE_FLAGS) -dirs | while read -r os arch dir; do \
	[ "$$dir" = "$(3)" ] && continue; echo "building $(1) for $$os/$$arch into $$dir"; \
	GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) $(2)" -o $$dir/ $(1) || exit 1; done
# Debian's qemu-user-static (user-mode emulation, no KVM), pinned, in the
# cache: the device plugins' tests run on s390x and arm64 under it.
QEMU_USER := 1:7.2+dfsg-7+deb12u18+b2
QEMU_DIR  := $(or $(CLOISTER_CACHE_DIR),$(CURDIR)/.cache)/qemu-user/$(subst :,_,$(QEMU_USER))
# go test's own timeout; CI allows 90 minutes for the whole run.
TEST_TIMEOUT ?= 45m
# make test lists the end-to-end suite first, so go test starts it first,
# and runs one test binary more than the machine has cores: the suite mostly
# waits on its clusters and the real node, and the unit tests' builds and
# runs use the cores meanwhile. The policy module's tests run beside them at
# a lower priority (nice), filling what CPU is left.
TEST_P ?= $(shell echo $$(( $$(nproc) + 1 )))
# go test prints a package's results only after those of the packages
# before it, so with the end-to-end suite first, make test says every
# minute what runs and what compiles meanwhile. Its sleep holds no output,
# so a pipe after make test ends when make test does.
test-progress = s=0; while sleep 60 >/dev/null 2>&1; do s=$$((s+60)); \
	run=$$(ps -eo etimes=,args= 2>/dev/null | awk '$$2 ~ /[.]test$$/ { n = split($$2, p, "/"); printf " %s (%dm)", p[n], $$1 / 60 }'); \
	comp=$$(ps -eo args= 2>/dev/null | awk '$$1 ~ /[/]compile$$/ { for (i = 1; i < NF; i++) if ($$i == "-p") printf " %s", $$(i + 1) }'); \
	echo "make test, $$((s / 60)) min:$${run:+ running$$run;}$${comp:+ compiling$$comp}"; done

# What make demo and make test need built besides the control plane.
TOOLS_ALSO :=
demo test: TOOLS_ALSO = --vault $(if $(filter 0,$(shell id -u)),--real-node)
# The Helm CLI too, before the tests: built inside the end-to-end suite, it
# shared the suite's time limit with a loaded machine.
test: TOOLS_ALSO += --helm

.PHONY: all help bootstrap tools generate build test unit e2e lint node-deps qemu-user bench fuzz images push demo demo-down clean

## all: build (the default target).
all: build

## help: every target and what it does (these ## comments).
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); printf "\n%s\n", $$0; next } /^## / { sub(/^## /, "  "); print }' $(firstword $(MAKEFILE_LIST))

## bootstrap: make's build helper (hack/gobuild) and its own cloister,
## saying from the first second, and every 5 s after it, what is compiled
## and how far it is.
bootstrap:
	@mkdir -p $(CACHE)/bin
	@echo "compiling make's build helper (hack/gobuild: the standard library and the toolchain package)"
	@{ { s=0; while sleep 5; do s=$$((s+5)); echo "tick $$s"; done; } & tick=$$!; \
		CGO_ENABLED=0 $(GO) build -trimpath -v -o $(GOBUILD) ./hack/gobuild 2>&1; rc=$$?; kill $$tick; echo "exit $$rc"; } | \
		{ n=0; while read -r line; do case "$$line" in \
			"exit "*) exit $${line#exit } ;; \
			"tick "*) echo "  build helper: $$n packages compiled, $${line#tick }s, latest $$last" ;; \
			*[\ :]*) echo "$$line" ;; \
			*) n=$$((n+1)); last=$$line; [ $$n -gt 1 ] || echo "  build helper: compiling, first $$line" ;; \
		esac; done; }
	@GO=$(GO) $(GOBUILD) -ldflags '$(LDFLAGS)' -o $(MAKE_CLOISTER) ./cmd/cloister

## tools: build the pinned etcd, kube-apiserver, kube-controller-manager,
## kube-scheduler, kubectl, kwok, kwokctl and controller-gen (once); for
## make demo and make test also the Vault server and, as root, the real
## node's kubelet, containerd and CNI plugins, whose modules download while
## the control plane compiles.
tools: bootstrap
	@$(MAKE_CLOISTER) dev tools $(TOOLS_ALSO) >/dev/null

## generate: deepcopy code and CRDs from the API types (commit the result;
## a test fails when they are stale).
generate: tools
	"$$($(MAKE_CLOISTER) dev tools)/controller-gen" $(CONTROLLER_GEN_ARGS)

## build: every binary into bin/ (saying how far a cold build is, as the
## toolchain does), and with PLATFORMS into bin/OS_ARCH; the operator's
## default images are then pinned to the index digests of the images of
## these binaries (make images), and the image cloister install deploys to
## the operator's.
build: tools
	@GO=$(GO) $(GOBUILD) -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...
	@$(call build-each,./cmd/...,,$(BIN))
	@pins=$$($(GORUN) ./hack/images $(IMAGE_FLAGS) -operator-ldflags) && \
		GO=$(GO) $(GOBUILD) -ldflags "$(LDFLAGS) $$pins" -o $(BIN)/ ./cmd/cloister-operator && \
		$(call build-each,./cmd/cloister-operator,$$pins,$(BIN)) && \
	pin=$$($(GORUN) ./hack/images $(IMAGE_FLAGS) -cli-ldflags) && \
		GO=$(GO) $(GOBUILD) -ldflags "$(LDFLAGS) $$pin" -o $(BIN)/ ./cmd/cloister && \
		$(call build-each,./cmd/cloister,$$pin,$(BIN))

## test: lint, then unit, envtest and end-to-end tests with the race detector;
## with PLATFORMS (all), first the release images for them (make images),
## which a test then checks.
## With another real node on the host (a running make demo), the real-node
## tests skip, and the last lines say so.
test: lint node-deps qemu-user $(if $(filter-out host,$(PLATFORMS)),images)
	@skips=$$(mktemp); agentpolicy=$$(mktemp); status=0; \
	nice -n 10 $(GO) -C $(AGENTPOLICY) test -race -count=1 ./... >$$agentpolicy 2>&1 & agentpolicy_pid=$$!; \
	{ $(test-progress); } & progress_pid=$$!; \
	$(if $(filter-out host,$(PLATFORMS)),CLOISTER_RELEASE_IMAGES=$(abspath $(IMAGES))) \
	CLOISTER_QEMU_USER=$(QEMU_DIR) CLOISTER_SKIP_LOG=$$skips $(GO) test -race -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) -tags e2e ./test/e2e ./... || status=$$?; \
	wait $$agentpolicy_pid || status=$$?; kill $$progress_pid 2>/dev/null; cat $$agentpolicy; rm -f $$agentpolicy; \
	if [ -s "$$skips" ]; then \
		echo "note: these tests skipped (go test without -v does not say so):"; sort -u "$$skips" | sed 's/^/      /'; \
	fi; rm -f "$$skips"; \
	if [ "$$(id -u)" = 0 ] && [ -e /sys/class/net/cloister0 ]; then \
		echo "note: a real node (a running make demo?) held this host, so the real-node tests skipped;"; \
		echo "      make demo-down, then make test, includes them"; \
	fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "note: not root, so the real-node tests, the dev cluster's routing-rule tests and its network audit skipped"; \
	fi; exit $$status

## unit: tests without the end-to-end suite (envtest still runs).
unit: tools qemu-user
	CLOISTER_QEMU_USER=$(QEMU_DIR) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) -C $(AGENTPOLICY) test -race -count=1 ./...

## e2e: the end-to-end suite against a fresh dev cluster.
e2e: tools
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags e2e ./test/e2e/...

## lint: gofmt, go.mod tidy, and golangci-lint (pinned in hack/linttools,
## built once into the tool cache; .golangci.yml says which linters and why).
lint: tools
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@$(GO) -C $(AGENTPOLICY) mod tidy -diff || { echo "$(AGENTPOLICY)'s go.mod/go.sum are not tidy: run go mod tidy there"; exit 1; }
	@dirs=$$($(MAKE_CLOISTER) dev tools --lint) && lint=$$(printf '%s\n' "$$dirs" | tail -1) && $(LINTENV) "$$lint/golangci-lint" run ./... && \
		cd $(AGENTPOLICY) && $(LINTENV) "$$lint/golangci-lint" run ./...

## bench: benchmarks, including dev cluster start-up with 3 and 1,000 nodes.
bench: tools
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -timeout $(TEST_TIMEOUT) -tags e2e ./...

## node-deps: as root, Debian's runc and nftables (nft, for hostPorts) for the real node's tests (a runc built
## from its module lacks seccomp here); without root those tests skip.
node-deps:
	@if [ "$$(id -u)" = 0 ] && { ! command -v runc || ! command -v nft; } >/dev/null && command -v apt-get >/dev/null; then \
		echo "installing runc and nftables (Debian) for the real-node tests"; \
		apt-get install -y -qq runc nftables >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq runc nftables >/dev/null; }; \
	fi

## qemu-user: Debian's qemu-user-static $(QEMU_USER), its s390x and
## aarch64 emulators only, into the cache (once; Debian's current one, said
## so, when the pinned one has left its index).
qemu-user:
	@if [ ! -x "$(QEMU_DIR)/qemu-s390x-static" ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's qemu-user-static $(QEMU_USER) into $(QEMU_DIR)"; \
		tmp=$$(mktemp -d) && cd "$$tmp" && get="apt-get download -qq -o APT::Sandbox::User=root"; \
		{ $$get qemu-user-static=$(QEMU_USER) || { apt-get update -qq && $$get qemu-user-static=$(QEMU_USER); } || \
		  { echo "note: qemu-user-static $(QEMU_USER) has left Debian's index; taking its current one"; $$get qemu-user-static; }; } && \
		dpkg-deb -x qemu-user-static_*.deb x && mkdir -p "$(QEMU_DIR)" && \
		cp x/usr/bin/qemu-s390x-static x/usr/bin/qemu-aarch64-static "$(QEMU_DIR)/"; \
		status=$$?; rm -rf "$$tmp"; exit $$status; \
	fi

## images: an OCI image index per binary (no Docker, no base image;
## reproducible), with an image for each of PLATFORMS (the host's alone by
## default; PLATFORMS=all for amd64, arm64 and s390x), as OCI-layout
## tarballs in .cache/images, and pinned.txt naming each by index digest;
## for this machine alone (PLATFORMS=host) also the dev cluster's Vault
## server (hack/vaulttools, built once into the cache: ~4 min cold).
## push: the same, pushed to
## REGISTRY (make push REGISTRY=ghcr.io/you), and signed with SIGN_KEY if
## given (an unencrypted ECDSA P-256 PEM key; cloister install
## --verify-image-signatures checks them with its public key).
images: build
	@$(if $(filter host,$(PLATFORMS)),dirs=$$($(MAKE_CLOISTER) dev tools --vault) && vault="$$(printf '%s\n' "$$dirs" | tail -1)/vault" &&) \
	$(GORUN) ./hack/images $(IMAGE_FLAGS) -out $(IMAGES) $(if $(filter host,$(PLATFORMS)),-vault "$$vault")

push: build
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=registry.example/prefix"; exit 1; }
	$(GORUN) ./hack/images $(IMAGE_FLAGS) -out $(IMAGES) -push $(REGISTRY) $(if $(SIGN_KEY),-sign-key $(SIGN_KEY))

## fuzz: every fuzz target, two at a time, FUZZTIME each (default 2m; 10m for the CAS API and policy parsers), with the executions each made.
fuzz:
	GO=$(GO) FUZZTIME=$(or $(FUZZTIME),2m) hack/fuzz.sh

## demo: the dev cluster (with a real node as root), the CRDs,
## cloister-operator and the SGXPlugin, CEXPlugin and LAS samples, shown
## HEALTHY; on the real node also CAS, a confidential pod and a Vault
## (hack/demo.sh).
demo: images node-deps
	hack/demo.sh up

## demo-down: stop the demo's CAS and operator, remove its dev cluster and state.
demo-down: build
	hack/demo.sh down

## clean: remove built binaries (the toolchain cache stays; rm -rf .cache to drop it).
clean:
	rm -rf $(BIN)

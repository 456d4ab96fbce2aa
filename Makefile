# iptables-alerter: see README.md.
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
HOOKSDIR ?= /etc/containers/oci/hooks.d
SYSCONFDIR ?= /etc
UNITDIR  ?= $(PREFIX)/lib/systemd/system
MANDIR   ?= $(PREFIX)/share/man
DESTDIR  ?=
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit and its time (UTC, as Go's vcs.time) for `version` and the
# build_info metric. Go stamps them itself (vcs.revision, vcs.time), but not
# in a linked git worktree (golang/go#58218) nor with -buildvcs=false, so
# they go in with -X too; empty (a tarball), the binary falls back to Go's.
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
# buildinfo holds the -X variables.
MODULE   := github.com/iptables-alerter/iptables-alerter
BUILDINFO := $(MODULE)/internal/buildinfo
LDFLAGS  := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).commitDate=$(COMMIT_DATE) \
	-X $(BUILDINFO).modified=$(if $(findstring -dirty,$(VERSION)),true,false)
GO       ?= go
BIN      := bin/iptables-alerter
# The same main package built with only the hook-side commands (hook, render,
# scan, version): the runtime execs it at every container start, and Go runs every
# linked package's init first, client-go's and client_golang's included.
HOOKBIN  := bin/iptables-alerter-hook
# The agent alone (agent, health, version): no client-go linked, so about a
# third of the full build and of its file-backed RSS (docs/performance.md).
AGENTBIN := bin/iptables-alerter-agent
# Big test tools (kube-apiserver, kubectl, ...) are built once into this
# cache, outside the repo. Its kubectl comes first on PATH, so the tests run
# the pinned one (Debian 12 has none); Go's default place comes last.
export IPTA_CACHE ?= /var/cache/iptables-alerter
export PATH := $(IPTA_CACHE)/kube/bin:$(PATH):/usr/local/go/bin

.PHONY: all build deps demo-deps bench-deps test race-build test-packages test-tools test-early test-unit test-integration bench demo install install-files uninstall lint clean image rpm machineconfig docs dashboards schema vendors crds chart chart-files set-release pin-image release release-check release-key release-chart release-deps registry-login github-release test-s390x

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./hook
	CGO_ENABLED=0 $(GO) build -tags hookonly -trimpath -ldflags "$(LDFLAGS)" -o $(HOOKBIN) ./hook
	CGO_ENABLED=0 $(GO) build -tags agentonly -trimpath -ldflags "$(LDFLAGS)" -o $(AGENTBIN) ./hook

# What each target runs against: make test everything; the demo and the
# benchmark only what they use (see tests/install-deps.sh).
deps:
	tests/install-deps.sh all
demo-deps:
	tests/install-deps.sh demo
bench-deps:
	tests/install-deps.sh bench

# Everything: installs its own packages and tools first.
# The hookonly build's tests (its dispatcher, the hook run as hooks.d runs
# it) run again with -tags hookonly; the full build's are tagged !hookonly.
# On a fresh machine most of its time is tests/install-deps.sh's builds, so
# they start once apt is done and everything that needs no built tool runs
# beside them: the checks, the race build of the project's own packages (and
# of what they import, which the tests then find compiled) and then the
# tests of every package not in TOOL_TESTS. The builds run at nice 10: the
# tests beside them get the cores when they want them, as on a quiet
# machine, and the builds take the rest. The TOOL_TESTS run when the tools
# are built. On a machine whose tools are cached, the tools step is a check.
# The TOOL_TESTS run three packages at a time, the longest first: most of
# their time is spent waiting on the daemons they start, and two at a time
# in the listed order left a core idle for a third of the step and ended
# on a long package started last (870 s; 591 s this way, on 2 cores).
test:
	$(MAKE) --no-print-directory -j4 lint test-early test-tools
	$(GO) test -race -count=1 -p 3 -timeout 40m $(TOOL_TESTS:%=./%)
	$(GO) test -race -count=1 -timeout 20m -tags hookonly ./hook

race-build:
	$(GO) build -race ./...

# The packages whose tests run a tool tests/install-deps.sh builds
# (kube-apiserver, kubectl, helm, CRI-O, containerd, cosign, Policy Reporter,
# the Prometheus Operator). test-early runs the others with neither the
# cache nor its bin directory in sight, so a test that starts to need a
# built tool fails there on every machine (CI=true turns its skip into a
# failure) until its package is added here. Listed longest first (go test
# starts them in this order; `make test` prints each one's time).
TOOL_TESTS := hook tests/runtime/nri tests/monitoring tests/packaging tests/cluster lib/openreports \
	tests/release lib/events tests/demo internal/kubeauth lib/owner lib/kubeapi tests/bench tests/kube/kubetest
# Expanded only by test-early: go list takes a moment.
EARLY_TESTS = $(filter-out $(TOOL_TESTS:%=$(MODULE)/%),$(shell $(GO) list ./...))
test-packages:
	tests/install-deps.sh packages
test-tools: test-packages
	nice -n 10 tests/install-deps.sh tools
test-early: test-packages race-build
	@echo "go test -race -count=1 -timeout 40m (every package not in TOOL_TESTS; no tool cache)"
	@IPTA_CACHE=$(CURDIR)/bin/no-tools PATH='$(subst $(IPTA_CACHE)/kube/bin:,,$(PATH))' \
		$(GO) test -race -count=1 -timeout 40m $(EARLY_TESTS)

# Only what needs neither root nor real tools.
test-unit:
	$(GO) test -count=1 -short ./...

# Every test against the real parts, as root, without -race (faster than
# test); CI=true turns a missing tool or root into a failure, not a skip.
test-integration: deps
	CI=true $(GO) test -count=1 -timeout 40m ./...
	CI=true $(GO) test -count=1 -timeout 20m -tags hookonly ./hook

bench: bench-deps build
	$(GO) run ./tests/bench -bin $(HOOKBIN) -agent-bin $(AGENTBIN)
	$(GO) test -run XXX -bench 'CRIOHook|CRIOAgent' -benchtime 1x -timeout 60m ./tests/bench -crio-bin $(abspath $(BIN)) -crio-hookbin $(abspath $(HOOKBIN))
	$(GO) test -run XXX -bench Reports -benchtime 1x -timeout 30m ./tests/bench -reports-bin $(abspath $(BIN))
	$(GO) test -run XXX -bench . -benchtime 20x ./lib/...

# make demo DEMO_KEEP=1 keeps the demo's findings, metrics and logs in the
# directory it names at the end (a command-line variable reaches the script).
demo: demo-deps build
	tests/demo.sh $(BIN) $(HOOKBIN)

# Refuse a hooks directory the node's CRI-O does not read, which would be a
# silent no-op (CRIO_CHECK=0 skips the check). With DESTDIR it reads the
# CRI-O configuration under DESTDIR: a package build root has none.
CRIO_CHECK ?= 1
install: build
	@if [ "$(CRIO_CHECK)" = 1 ]; then $(BIN) install-hook --check-only --root "$(if $(DESTDIR),$(DESTDIR),/)" --hooks-dir "$(HOOKSDIR)"; fi
	for u in packaging/systemd/*.service packaging/systemd/*.timer; do \
		install -d -m 0755 $(DESTDIR)$(UNITDIR) && \
		sed 's|/usr/local/bin/|$(BINDIR)/|' $$u > $(DESTDIR)$(UNITDIR)/$${u##*/} && chmod 0644 $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
	done
	[ -e $(DESTDIR)$(SYSCONFDIR)/iptables-alerter/allowlist.json ] || install -D -m 0644 packaging/allowlist.json $(DESTDIR)$(SYSCONFDIR)/iptables-alerter/allowlist.json
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man8
	install -m 0644 docs/man/*.8 $(DESTDIR)$(MANDIR)/man8/
	$(MAKE) --no-print-directory install-files

# install-files installs what build made. The binaries first, then the
# hooks.d JSON: CRI-O skips a hook whose binary is missing when it reads the
# JSON and does not look again. Each file is written under a temporary name
# in its own directory and renamed into place, so a hook starting during an
# upgrade runs the old binary or the new one, never half a file, and CRI-O
# (which reads only *.json) never sees half a JSON. BINDIR goes into the
# JSON's shell command unquoted, so it may hold only plain path characters.
install-files:
	@case '$(BINDIR)' in /*) ;; *) echo 'BINDIR must be absolute'; exit 1;; esac
	@case '$(BINDIR)' in *[!A-Za-z0-9/._+-]*) echo 'BINDIR may hold only A-Za-z0-9/._+-'; exit 1;; esac
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(HOOKSDIR)
	install -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/.iptables-alerter.tmp
	mv -fT $(DESTDIR)$(BINDIR)/.iptables-alerter.tmp $(DESTDIR)$(BINDIR)/iptables-alerter
	install -m 0755 $(HOOKBIN) $(DESTDIR)$(BINDIR)/.iptables-alerter-hook.tmp
	mv -fT $(DESTDIR)$(BINDIR)/.iptables-alerter-hook.tmp $(DESTDIR)$(BINDIR)/iptables-alerter-hook
	install -m 0755 $(AGENTBIN) $(DESTDIR)$(BINDIR)/.iptables-alerter-agent.tmp
	mv -fT $(DESTDIR)$(BINDIR)/.iptables-alerter-agent.tmp $(DESTDIR)$(BINDIR)/iptables-alerter-agent
	sed 's|/usr/local/bin/|$(BINDIR)/|g' hooks.d/iptables-alerter.json > $(DESTDIR)$(HOOKSDIR)/.iptables-alerter.json.tmp
	chmod 0644 $(DESTDIR)$(HOOKSDIR)/.iptables-alerter.json.tmp
	mv -fT $(DESTDIR)$(HOOKSDIR)/.iptables-alerter.json.tmp $(DESTDIR)$(HOOKSDIR)/iptables-alerter.json

# The JSON first: CRI-O then never reads a JSON whose binary is gone (and
# if it did, the JSON's command exits 0 without its binary).
uninstall:
	rm -f $(DESTDIR)$(HOOKSDIR)/iptables-alerter.json
	rm -f $(DESTDIR)$(BINDIR)/iptables-alerter $(DESTDIR)$(BINDIR)/iptables-alerter-hook $(DESTDIR)$(BINDIR)/iptables-alerter-agent
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(wildcard packaging/systemd/*.service packaging/systemd/*.timer)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(wildcard docs/man/*.8)))

# Regenerate the OpenShift MachineConfig YAML from its Butane sources (after
# a change to hooks.d/iptables-alerter.json or the units it carries).
machineconfig:
	$(GO) test -count=1 -run TestMachineConfig ./tests/packaging -update

# Regenerate the OpenShift console's copy of the dashboard
# (packaging/monitoring/console/console-dashboard.json) from
# packaging/monitoring/grafana-dashboard.json, in the panel types and
# variables the console's dashboards read (tests/packaging's
# TestConsoleDashboard fails while it is stale).
dashboards:
	$(GO) test -count=1 -run 'TestConsoleDashboard$$' ./tests/packaging -update

# Regenerate the man pages (docs/man/), docs/cli.md and the README's CLI
# reference from the flag definitions, and docs/metrics.md from the metric
# registries (after a change to a command's flags or help, or to a
# metric); TestReference fails while they are stale.
docs:
	$(GO) test -count=1 -timeout 30m -run TestReference ./hook -update-docs

# The built-in vendor table as the binaries carry it: lib/catalog/builtin.go,
# a Go literal written from lib/catalog/vendors.json (TestBuiltinUpToDate
# fails while they differ).
vendors:
	$(GO) test -count=1 -tags nobuiltin -run TestBuiltinUpToDate ./lib/catalog -update-builtin

# The JSON Schemas in docs/schema, made from the Go types that write each
# format (internal/testkit/schematest's TestSchemasUpToDate fails when they
# are stale).
schema:
	$(GO) test -count=1 -run TestSchemasUpToDate ./internal/testkit/schematest -update-schemas

# Copy the OpenReports CRDs (Report and ClusterReport: Policy Reporter reads
# neither unless both are served) from the module go.mod names into
# packaging/crds (lib/openreports' TestShippedCRD fails when they differ).
CRDS := openreports.io_reports.yaml openreports.io_clusterreports.yaml
crds:
	for f in $(CRDS); do \
		cp "$$($(GO) list -m -f '{{.Dir}}' github.com/openreports/reports-api)/config/crd/$$f" packaging/crds/ && \
		chmod 644 packaging/crds/$$f || exit 1; \
	done
	$(MAKE) --no-print-directory chart-files

# The Helm chart (packaging/helm/iptables-alerter) carries copies of the
# OpenReports CRDs, the alerts and the dashboard (Grafana's and, regenerated
# first, the console's), as a chart reads nothing outside its directory;
# tests/packaging's TestHelmFilesInSync fails when they differ.
CHART := packaging/helm/iptables-alerter
chart-files: dashboards
	cp $(addprefix packaging/crds/,$(CRDS)) packaging/monitoring/prometheusrule.yaml packaging/monitoring/grafana-dashboard.json \
		packaging/monitoring/console/console-dashboard.json $(CHART)/files/

# The chart's package in bin/, its appVersion (the default image tag) the
# version `make image` tags the image with, its version the same made
# semver: v1.2.3 -> 1.2.3, v1.2.3-4-gabc -> 1.2.3-4-gabc, and a commit with
# no tag before it (abc1234) -> 0.0.0-gabc1234. helm: tests/kube/build-helm.sh.
CHART_VERSION ?= $(shell echo '$(VERSION)' | sed -E 's/^v//; /^[0-9]+\.[0-9]+\.[0-9]+/!s/^/0.0.0-g/')
HELM ?= helm
CHART_DEST ?= bin
chart:
	$(HELM) lint --strict --kube-version 1.29.0 $(CHART)
	$(HELM) package $(CHART) --destination $(CHART_DEST) --version $(CHART_VERSION) --app-version $(VERSION)

# The RPM (packaging/rpm/iptables-alerter.spec) from a tarball of HEAD;
# the spec builds and runs make install DESTDIR=%{buildroot}.
# RPMBUILDFLAGS=--nodeps where rpm knows no installed packages (Debian).
RPM_VERSION ?= $(shell v=$$(git describe --tags --abbrev=0 2>/dev/null | sed 's/^v//'); echo $${v:-0.0.0})
RPMDIR ?= $(CURDIR)/bin/rpmbuild
RPMBUILDFLAGS ?=
rpm:
	rm -rf $(RPMDIR) && mkdir -p $(RPMDIR)/SOURCES
	git archive --format=tar.gz --prefix=iptables-alerter-$(RPM_VERSION)/ -o $(RPMDIR)/SOURCES/iptables-alerter-$(RPM_VERSION).tar.gz HEAD
	rpmbuild -bb $(RPMBUILDFLAGS) --define "_topdir $(RPMDIR)" --define "version $(RPM_VERSION)" --define "gitversion $(VERSION)" \
		--define "gitcommit $(COMMIT)" --define "gitdate $(COMMIT_DATE)" packaging/rpm/iptables-alerter.spec

# The image: a manifest list of one image per platform, each the static
# binaries of `make build` cross-compiled for it on an empty base
# (packaging/Containerfile), built offline from a staged context holding
# only what it copies. FROM scratch with only COPY runs nothing in the
# image, so building for another architecture needs no emulation. Each
# build is --no-cache: a cached layer of the same files built for another
# platform must not stand in. The per-platform images are tagged
# $(IMAGE)-ARCH; push the list with
#   podman manifest push --all $(IMAGE) docker://REGISTRY/iptables-alerter:$(VERSION)
IMAGE ?= localhost/iptables-alerter:$(VERSION)
IMAGE_CONTEXT ?= bin/image
PLATFORMS ?= linux/amd64 linux/arm64
PODMAN ?= podman
image:
	rm -rf $(IMAGE_CONTEXT)
	$(PODMAN) manifest rm $(IMAGE) >/dev/null 2>&1 || $(PODMAN) rmi $(IMAGE) >/dev/null 2>&1 || true
	$(PODMAN) manifest create $(IMAGE)
	for p in $(PLATFORMS); do \
		arch=$${p#*/} && ctx=$(IMAGE_CONTEXT)/$$arch && mkdir -p $$ctx && \
		GOOS=$${p%%/*} GOARCH=$$arch $(MAKE) --no-print-directory build BIN=$$ctx/iptables-alerter HOOKBIN=$$ctx/iptables-alerter-hook AGENTBIN=$$ctx/iptables-alerter-agent && \
		cp hooks.d/iptables-alerter.json $$ctx/ && \
		$(PODMAN) build --pull=never --no-cache --platform $$p -f packaging/Containerfile -t $(IMAGE)-$$arch \
			--build-arg VERSION=$(VERSION) --build-arg REVISION=$(or $(COMMIT),unknown) \
			--build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) $$ctx && \
		$(PODMAN) manifest add $(IMAGE) containers-storage:$(IMAGE)-$$arch || exit 1; \
	done

# A release: set-release before tagging, so the tagged kustomize base
# pulls the tag's image; pin-image after `make release` pushed it (its
# digest in dist/image.digest), so the MachineConfig's boot-time pull
# names that image by digest (a commit after the tag: the image's labels
# name the tagged commit). docs/install-openshift.md#releases-tag-and-digest.
set-release:
	@case '$(RELEASE)' in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo 'RELEASE=vX.Y.Z'; exit 1;; esac
	sed -i 's|^    newTag: .*|    newTag: $(RELEASE)|' packaging/kubernetes/kustomization.yaml
	sed -i 's|^version: .*|version: $(patsubst v%,%,$(RELEASE))|; s|^appVersion: .*|appVersion: "$(RELEASE)"|' $(CHART)/Chart.yaml
pin-image:
	@case '$(IMAGE_REF)' in *@sha256:*) ;; *) echo 'IMAGE_REF=REGISTRY/PATH@sha256:DIGEST'; exit 1;; esac
	sed -i 's|^IPTABLES_ALERTER_IMAGE=.*|IPTABLES_ALERTER_IMAGE=$(IMAGE_REF)|' packaging/openshift/machineconfig/iptables-alerter-install.env
	$(MAKE) --no-print-directory machineconfig

# The notes of VERSION: its CHANGELOG.md section's lines, up to the next
# section (release-check and github-release read the same).
release_notes = awk '/^\#\# /{p = index($$0, "[$(patsubst v%,%,$(VERSION))]") > 0; next} p' CHANGELOG.md

# release-check: where HEAD is tagged VERSION (the release workflow's
# run), what the tag publishes says VERSION before anything is pushed: the
# kustomize base's newTag and the chart's version and appVersion (make
# set-release), and a CHANGELOG.md section (make github-release's notes).
# Found only after the pushes, the registry held the release and GitHub
# none, its index.yaml still the last release's. An untagged HEAD (your own
# release, the tests') is not checked.
release-check:
	@git tag --points-at HEAD 2>/dev/null | grep -qxF '$(VERSION)' || exit 0; \
	grep -qxF '    newTag: $(VERSION)' packaging/kubernetes/kustomization.yaml && \
	grep -qxF 'version: $(patsubst v%,%,$(VERSION))' $(CHART)/Chart.yaml && \
	grep -qxF 'appVersion: "$(VERSION)"' $(CHART)/Chart.yaml || \
		{ echo 'HEAD is tagged $(VERSION), but the kustomize base or the chart names another version: make set-release RELEASE=$(VERSION), commit, and tag that commit'; exit 1; }; \
	$(release_notes) | grep -q '[^[:space:]]' || \
		{ echo 'HEAD is tagged $(VERSION), but CHANGELOG.md has no section ## [$(patsubst v%,%,$(VERSION))] with notes: add it, commit, and tag that commit'; exit 1; }

# make release VERSION=vX.Y.Z REGISTRY=HOST[:PORT]/PATH COSIGN_KEY=cosign.key
# (docs/release.md): builds and pushes to REGISTRY the multi-arch image
# (REGISTRY/iptables-alerter:VERSION, by internal/ociimage from
# packaging/Containerfile) and the chart (oci://REGISTRY/charts), signs
# both and the image's SBOM with cosign (key-based, no transparency log:
# the reasons are in docs/release.md), and leaves in DIST the chart's .tgz
# and index.yaml for a static chart repository at CHART_REPO_URL, the RPM,
# a tar.gz of the full binary per platform (the krew plugin's), the SBOM,
# SHA256SUMS and its signature, and a kustomize overlay of
# KUSTOMIZE_BASE that pulls the pushed image by digest. COSIGN_PASSWORD
# (environment) unlocks the key. Plain HTTP only to a loopback registry.
DIST ?= dist
REGISTRY ?=
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 linux/ppc64le linux/s390x
COSIGN ?= $(IPTA_CACHE)/release/bin/cosign
CYCLONEDX_GOMOD ?= $(IPTA_CACHE)/release/bin/cyclonedx-gomod
COSIGN_KEY ?=
CHART_REPO_URL ?= https://github.com/iptables-alerter/iptables-alerter/releases/download/$(VERSION)
KUSTOMIZE_BASE ?= $(CURDIR)/packaging/kubernetes
RELEASE_IMAGE = $(REGISTRY)/iptables-alerter
PLAIN_HTTP = $(if $(filter localhost:% 127.0.0.1:% [::1]:%,$(REGISTRY)),--plain-http)
COSIGN_SIGN = $(COSIGN) sign --yes --key $(COSIGN_KEY) --tlog-upload=false
# The archive of the full binary and LICENSE for a platform (os/arch), as
# packaging/krew/iptables-alerter.yaml names it: `kubectl iptables-alerter`.
release_archive = iptables-alerter-$(VERSION)-$(subst /,-,$(1)).tar.gz
# Owner, order, modes and times fixed, and gzip -n (no name, no time): the
# same commit gives the same archives.
RELEASE_TAR = --sort=name --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w,go-w --mtime=$(or $(COMMIT_DATE),1970-01-01T00:00:00Z) -c
release:
	@case '$(VERSION)' in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo 'VERSION=vX.Y.Z'; exit 1;; esac
	@case '$(REGISTRY)' in ?*/?*) ;; *) echo 'REGISTRY=HOST[:PORT]/PATH'; exit 1;; esac
	@case '$(COSIGN_KEY)' in env://?*) ;; *) [ -f '$(COSIGN_KEY)' ] || { echo 'COSIGN_KEY=FILE or env://VAR: a cosign private key'; exit 1; };; esac
	@case '$(DIST)' in ''|/) echo 'DIST=a directory of its own'; exit 1;; esac
	@[ -n '$(RELEASE_DIRTY_OK)' ] || [ -z "$$(git status --porcelain 2>/dev/null)" ] || \
		{ git status --short; echo 'the tree has changes: a release is of HEAD, and its binaries, image and RPM say so (an explicit VERSION has no -dirty); commit them or move them away'; exit 1; }
	$(MAKE) --no-print-directory release-check
	rm -rf $(DIST) && mkdir -p $(DIST)/image $(DIST)/chart
	$(MAKE) --no-print-directory release-key
	for p in $(RELEASE_PLATFORMS); do \
		ctx=$(DIST)/image/$${p#*/} && mkdir -p $$ctx && \
		GOOS=$${p%%/*} GOARCH=$${p#*/} $(MAKE) --no-print-directory build BIN=$$ctx/iptables-alerter HOOKBIN=$$ctx/iptables-alerter-hook AGENTBIN=$$ctx/iptables-alerter-agent && \
		cp hooks.d/iptables-alerter.json $$ctx/ || exit 1; \
	done
	CGO_ENABLED=0 $(GO) run -trimpath ./internal/ociimage -containerfile packaging/Containerfile -ref $(RELEASE_IMAGE):$(VERSION) \
		-created $(or $(COMMIT_DATE),1970-01-01T00:00:00Z) -digest-file $(DIST)/image.digest \
		-build-arg VERSION=$(VERSION) -build-arg REVISION=$(or $(COMMIT),unknown) -build-arg CREATED=$(or $(COMMIT_DATE),1970-01-01T00:00:00Z) \
		$(foreach p,$(RELEASE_PLATFORMS),-platform $(p)=$(DIST)/image/$(notdir $(p)))
	$(CYCLONEDX_GOMOD) bin -json -version $(VERSION) -output $(DIST)/iptables-alerter.cdx.json \
		$(DIST)/image/$(notdir $(firstword $(RELEASE_PLATFORMS)))/iptables-alerter
	$(COSIGN_SIGN) $(RELEASE_IMAGE)@$$(cat $(DIST)/image.digest)
	$(COSIGN) attest --yes --key $(COSIGN_KEY) --tlog-upload=false --type cyclonedx \
		--predicate $(DIST)/iptables-alerter.cdx.json $(RELEASE_IMAGE)@$$(cat $(DIST)/image.digest)
	$(MAKE) --no-print-directory release-chart
	$(HELM) push $(PLAIN_HTTP) $(DIST)/iptables-alerter-$(CHART_VERSION).tgz oci://$(REGISTRY)/charts >$(DIST)/chart.push 2>&1 || \
		{ cat $(DIST)/chart.push; exit 1; }
	cat $(DIST)/chart.push && sed -n 's/^Digest: \(sha256:[0-9a-f]\{64\}\)$$/\1/p' $(DIST)/chart.push >$(DIST)/chart.digest && [ -s $(DIST)/chart.digest ]
	$(COSIGN_SIGN) $(REGISTRY)/charts/iptables-alerter@$$(cat $(DIST)/chart.digest)
	$(HELM) repo index $(DIST) --url $(CHART_REPO_URL)
	$(MAKE) --no-print-directory rpm RPM_VERSION=$(patsubst v%,%,$(VERSION)) RPMDIR=$(abspath $(DIST))/rpmbuild
	cp $(DIST)/rpmbuild/RPMS/*/*.rpm $(DIST)/
	$(foreach p,$(RELEASE_PLATFORMS),tar $(RELEASE_TAR) -f $(DIST)/$(basename $(call release_archive,$(p))) \
		-C $(DIST)/image/$(notdir $(p)) iptables-alerter -C $(CURDIR) LICENSE && \
		gzip -n -9 $(DIST)/$(basename $(call release_archive,$(p))) &&) true
	mkdir -p $(DIST)/kustomize && base='$(KUSTOMIZE_BASE)' && \
		{ [ ! -d "$$base" ] || base=$$(realpath --relative-to=$(DIST)/kustomize "$$base"); } && printf '%s\n' \
		'# kubectl apply -k DIR: the $(VERSION) manifests with the image pushed by make release, by digest.' \
		'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
		'resources:' "  - $$base" 'images:' '  - name: ghcr.io/iptables-alerter/iptables-alerter' \
		'    newName: $(RELEASE_IMAGE)' "    digest: $$(cat $(DIST)/image.digest)" >$(DIST)/kustomize/kustomization.yaml
	cd $(DIST) && sha256sum *.rpm *.tgz *.tar.gz index.yaml iptables-alerter.cdx.json image.digest >SHA256SUMS
	$(COSIGN) sign-blob --yes --key $(COSIGN_KEY) --tlog-upload=false --output-signature $(DIST)/SHA256SUMS.sig $(DIST)/SHA256SUMS
	rm -rf $(DIST)/image $(DIST)/chart $(DIST)/rpmbuild $(DIST)/chart.push

# The release's public key, DIST/cosign.pub (a file of the GitHub release,
# what its users verify with), from COSIGN_KEY. Once the owners committed
# the project's key as RELEASE_KEY_PUB (cosign.pub at the top), a release
# signed with any other key stops here, before anything is pushed: a
# leaked or mistaken CI secret cannot sign a release users would check
# against a key they do not have. RELEASE_KEY_PUB= (empty) skips the check:
# the tests, whose key is their own.
RELEASE_KEY_PUB ?= cosign.pub
# Set (to anything), make release goes on in a tree with changes, which it
# otherwise refuses: only for the tests, which release the tree they test.
RELEASE_DIRTY_OK ?=
release-key:
	@case '$(DIST)' in ''|/) echo 'DIST=a directory of its own'; exit 1;; esac
	mkdir -p $(DIST) && $(COSIGN) public-key --key $(COSIGN_KEY) --outfile $(DIST)/cosign.pub
	@if [ -n '$(RELEASE_KEY_PUB)' ] && [ -f '$(RELEASE_KEY_PUB)' ] && \
		[ "$$(tr -d '[:space:]' <'$(RELEASE_KEY_PUB)')" != "$$(tr -d '[:space:]' <$(DIST)/cosign.pub)" ]; then \
		echo 'COSIGN_KEY is not the key of $(RELEASE_KEY_PUB): refusing to sign a release with it'; rm -f $(DIST)/cosign.pub; exit 1; \
	fi

# The release's chart, packaged into DIST: its default image is the
# release's repository, pinned to the digest in DIST/image.digest by the
# Chart.yaml annotation iptables-alerter.io/image, not by values.yaml's
# image.digest: `helm upgrade --reuse-values` renders the new chart with the
# old release's values, and a digest there ran the old image under the new
# tag. Part of make release; a target of its own for the tests.
release-chart:
	@[ -s $(DIST)/image.digest ] || { echo '$(DIST)/image.digest: the released image index digest'; exit 1; }
	rm -rf $(DIST)/chart && mkdir -p $(DIST)/chart && cp -r $(CHART) $(DIST)/chart/
	sed -i 's|^  repository: .*|  repository: $(RELEASE_IMAGE)|' $(DIST)/chart/iptables-alerter/values.yaml
	sed -i 's|^  iptables-alerter.io/image: .*|  iptables-alerter.io/image: "$(RELEASE_IMAGE)@'$$(cat $(DIST)/image.digest)'"|' $(DIST)/chart/iptables-alerter/Chart.yaml
	grep -q '^  iptables-alerter.io/image: "$(RELEASE_IMAGE)@sha256:' $(DIST)/chart/iptables-alerter/Chart.yaml
	$(MAKE) --no-print-directory chart CHART=$(DIST)/chart/iptables-alerter CHART_DEST=$(DIST)

# What make release runs besides Go: helm, cosign and cyclonedx-gomod
# built into the cache, rpmbuild from apt (tests/install-deps.sh release).
release-deps:
	tests/install-deps.sh release

# Log in to REGISTRY's host for the image (cosign login writes the
# ~/.docker/config.json that internal/ociimage and cosign read) and for the
# chart (helm keeps its own); the credentials come from the environment,
# never the command line.
REGISTRY_HOST = $(firstword $(subst /, ,$(REGISTRY)))
registry-login:
	@[ -n "$$REGISTRY_USER" ] && [ -n "$$REGISTRY_PASSWORD" ] || { echo 'REGISTRY_USER and REGISTRY_PASSWORD (environment)'; exit 1; }
	printenv REGISTRY_PASSWORD | $(COSIGN) login $(REGISTRY_HOST) -u "$$REGISTRY_USER" --password-stdin
	printenv REGISTRY_PASSWORD | $(HELM) registry login $(REGISTRY_HOST) -u "$$REGISTRY_USER" --password-stdin

# The GitHub release of the tag VERSION with make release's files and the
# CHANGELOG.md section of VERSION as its notes (gh, GH_TOKEN).
github-release:
	$(release_notes) >$(DIST)/RELEASE_NOTES.md
	@grep -q '[^[:space:]]' $(DIST)/RELEASE_NOTES.md || { echo 'CHANGELOG.md has no section ## [$(patsubst v%,%,$(VERSION))] with notes'; exit 1; }
	gh release create $(VERSION) --verify-tag --title $(VERSION) --notes-file $(DIST)/RELEASE_NOTES.md \
		$(DIST)/*.rpm $(DIST)/*.tgz $(DIST)/*.tar.gz $(DIST)/index.yaml $(DIST)/iptables-alerter.cdx.json $(DIST)/SHA256SUMS $(DIST)/SHA256SUMS.sig \
		$(DIST)/cosign.pub $(DIST)/image.digest

# The kernel-structure decoders' tests built for linux/s390x (big-endian)
# and run under qemu-s390x-static (tests/release's TestDecodersS390x).
test-s390x:
	$(GO) test -count=1 -timeout 30m -run TestDecodersS390x -v ./tests/release

# vet checks what is shipped (CGO_ENABLED=0, -trimpath, as make build), and
# the dependencies it compiles for that are the ones make build, the tests'
# builds (internal/testkit/testbin) and make release then find in the Go
# build cache: one compilation for all, not one per set of flags.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet -trimpath ./...
	CGO_ENABLED=0 $(GO) vet -trimpath -tags hookonly ./hook
	CGO_ENABLED=0 $(GO) vet -trimpath -tags agentonly ./hook

clean:
	rm -rf bin

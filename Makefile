# The two commands of the README: `make demo` (set up everything and run the demo) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Local-only dev tools (devcluster, demo) are not in the wheel: run them from the source tree.
DEVTOOLS := PYTHONPATH=operator $(BIN)/python -m sunk_sandbox_devtools

.PHONY: setup binaries helm helm4 kube-oldest promtool slurm slurm-chroots argocd-health image tools-image tools-go demo test unit integration e2e bench bench-scale crd chart-sync clean devcluster-up devcluster-down

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,local]"
	touch $@

setup: $(BIN)/.installed

# etcd, kube-apiserver and kubectl built from the pinned Go modules in hack/ (cached per version).
binaries: setup
	$(DEVTOOLS) devcluster build

# helm, built the same way from hack/helm (the Helm integration tests use it).
helm: setup
	$(DEVTOOLS) devcluster helm

# helm 4 beside it, from hack/helm4 (the Helm tests run once per major).
helm4: setup
	$(DEVTOOLS) devcluster helm4

# The kube-apiserver of the oldest minor Chart.yaml's kubeVersion accepts, from hack/kube-oldest
# (tests/integration/test_oldest_kubernetes.py; etcd and kubectl are the current ones).
kube-oldest: setup
	$(DEVTOOLS) devcluster oldest

# promtool, built the same way from hack/promtool (`promtool test rules` on the shipped alerts).
promtool: setup
	$(DEVTOOLS) devcluster promtool

# Slurm (slurmctld, slurmd, slurmrestd, munge) from Debian's packages, for the Slurm integration tests:
# apt-get install when missing (root), a few stat calls when present. The tests start their own daemons.
slurm: setup
	$(DEVTOOLS) slurm install

# Slurm 24.11 (trixie) and 26.05 (sid) for the same tests: debootstrap chroots (root; ~1 min each the
# first time, cached under ~/.cache/sunk-sandbox-operator/slurm/). `make test` builds them in the
# background, in the image lane (tools-image).
slurm-chroots: setup
	$(DEVTOOLS) slurm chroots

# argocd-health, built the same way from hack/argocd: Argo CD's own health engine (util/lua,
# gitops-engine) on the shipped manifests/argocd health check.
argocd-health: setup
	$(DEVTOOLS) devcluster argocd-health

# The operator image: a Debian base made with debootstrap, then `buildah bud` of the Dockerfile
# (vfs storage, chroot isolation; no registry, no daemon). Cached under ~/.cache/sunk-sandbox-operator/image/.
image: setup
	$(DEVTOOLS) image

demo: binaries
	$(DEVTOOLS) demo

# What a release publishes, into dist/: the chart package, the image as an OCI archive, its SBOM,
# the wheel, the kubectl plugin (one file per OS/arch) and its krew manifest, SHA256SUMS and
# release.json. docs/development.md, "Releasing" says how a maintainer publishes them.
.PHONY: release registry
release: setup
	$(DEVTOOLS) release

# The OCI registry the release test pushes to (distribution, from hack/registry; cached like helm).
registry: setup
	$(DEVTOOLS) registry build

# helm 3 and 4, promtool, argocd-health, the oldest kube-apiserver, the Slurm chroots and the image
# are built in the background while the tests that need none of them run
# (sunk_sandbox_devtools/tools.py): the chroots then the image beside the control plane's build, the Go tools after it (they reuse its compiled k8s.io packages); slurm
# first, so two apt-get never overlap.
tools-image: setup
	$(DEVTOOLS) tools start image

tools-go: setup
	$(DEVTOOLS) tools start go

test: slurm tools-image binaries tools-go
	$(BIN)/python -m pytest -ra

unit: setup
	$(BIN)/python -m pytest -ra tests/unit

integration: binaries helm helm4 promtool slurm slurm-chroots argocd-health kube-oldest
	$(BIN)/python -m pytest -ra tests/integration

e2e: binaries image
	$(BIN)/python -m pytest -ra tests/e2e

bench: bench-scale

# The CRD from the models, into crds/ and (with the other generated parts of the chart) the chart.
crd: setup
	$(BIN)/sunk-sandbox-operator crd > crds/sunksandboxbindings.yaml
	$(DEVTOOLS) chart sync

# The chart's copies (CRD, alerts, dashboard), its appVersion and docs/configuration.md's values table, from their sources.
chart-sync: setup
	$(DEVTOOLS) chart sync

devcluster-up: binaries
	$(DEVTOOLS) devcluster up

devcluster-down:
	$(DEVTOOLS) devcluster down

clean:
	rm -rf $(VENV) .devcluster .pytest_cache .hypothesis

# The scale benchmark (prints figures beside the goals; small by default). Full size, ~10 min on 2 cores:
#   make bench-scale SCALE="--namespaces 10000 --pods 50000 --burst 1000 --churn 5000"
SCALE ?=
bench-scale: binaries
	PYTHONPATH=operator $(BIN)/python -m tests.bench.scale $(SCALE)

# One hostile tenant at a time (a slurm.conf key of 140,000 spaces, a $(X) expansion bomb, a 24,000-digit
# kill-wait, 110 ConfigMaps of 1 MB) while another tenant's new namespaces are timed; two replicas;
# Lease transitions, /healthz and peak RSS beside the baseline (~10 min on 2 cores):
#   make bench-hostile HOSTILE="--only 1,3 --dwell 60"
HOSTILE ?=
.PHONY: bench-hostile
bench-hostile: binaries
	PYTHONPATH=operator $(BIN)/python -m tests.bench.hostile $(HOSTILE)

# Start figures move by a second from one control plane to the next: compare code on one cluster,
# the operator started again and again from each source tree in turn (a checkout's root), e.g.
#   git worktree add /tmp/base HEAD~1 && make bench-starts STARTS="--grant --tree /tmp/base --tree ."
STARTS ?=
.PHONY: bench-starts
bench-starts: binaries
	PYTHONPATH=operator $(BIN)/python -m tests.bench.starts $(STARTS)

# Crash chaos: SIGKILL the operator at random moments under a workload, then convergence, lost
# admin edits, leaks and an exact Restore (figures, FAIL lines; ~10 min with 50 kills):
#   make chaos CHAOS="--kills 50 --seed 1"
CHAOS ?=
.PHONY: chaos
chaos: binaries
	PYTHONPATH=operator $(BIN)/python -m tests.bench.chaos $(CHAOS)

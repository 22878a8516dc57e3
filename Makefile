# The two commands of the README, and the install steps they share. Every step is
# idempotent and only does what is missing, so a second run costs seconds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# chromium renders the HTML report in tests/unit/test_html_report.py (headless, no Playwright).
# gcc, libc6-dev and libseccomp-dev build the nodes' runc (cgo) and pause (gcc -static) with
# `lbconform lab build --with nodes`, which checks for them too; the rest go into the real nodes'
# images (lbconform_lab.images.DEBS: a unit test checks that this list holds them).
DEBS   := iproute2 nftables conntrack tcpdump wrk util-linux procps chromium gcc libc6-dev libseccomp-dev \
	busybox-static curl netcat-openbsd bash jq python3.11-minimal libpython3.11-stdlib
STAMP  := $(VENV)/.installed
# Shared with src/lbconform_lab/build.py: built binaries and the Allure CLI live outside the repo.
LBCONFORM_CACHE ?= $(HOME)/.cache/lbconform
# Allure 3 (npm `allure`) builds the HTML report with node alone; Allure 2 would need a JRE.
# Keep equal to ALLURE_VERSION in src/lbconform/report/html.py (a unit test checks).
ALLURE_VERSION := 3.18.0
ALLURE_DIR     := $(LBCONFORM_CACHE)/allure-$(ALLURE_VERSION)
ALLURE         := $(ALLURE_DIR)/node_modules/.bin/allure

.PHONY: run test setup debs python binaries allure unit lab lint types bench clean

run: setup
	$(BIN)/lbconform run

# The unit tests in one process beside the lab tests (they share nothing, and the lab tests wait
# more than they compute: this takes the unit tests' minute off the run); the unit tests' output
# is printed once the lab tests end, and either failing fails.
test: setup
	@status=0; unit_log=$$(mktemp); \
	$(BIN)/pytest tests/unit -p no:cacheprovider --durations=10 >"$$unit_log" 2>&1 & unit=$$!; \
	$(BIN)/pytest tests/lab -p no:cacheprovider --durations=25 --own-labs-beside || status=$$?; \
	wait $$unit || status=$$?; cat "$$unit_log"; rm -f "$$unit_log"; \
	exit $$status

setup: debs python binaries allure

debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# --no-compile: Python compiles what a process imports, once, as it imports it; compiling every
# installed package up front took 18 s of the install's 51 s here.
python: $(STAMP)
# Two distributions: the harness (lbconform, for any cluster) and the lab (lbconform-lab, the
# hermetic cluster it runs against when no kubeconfig is named).
$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -e '.[dev]' -e ./lab
	touch $(STAMP)

# MetalLB and kube-vip too: the lab tests certify them (lab up --lb metallb|kube-vip), and each
# builds in its own module; and the real nodes' kubelet, containerd, runc, CNI plugins and crictl
# (lab up --node-runtime containerd, which tests/lab/test_real_nodes.py boots).
binaries: python
	$(BIN)/lbconform lab build --with metallb --with kube-vip --with nodes

# One folder per version, so a new pin installs beside the old one and never mixes with it;
# the CLI's own file is the stamp, written last by npm.
allure: $(ALLURE)
$(ALLURE):
	@command -v npm >/dev/null 2>&1 || { echo "installing Debian packages: nodejs npm"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { \
	  echo "Allure $(ALLURE_VERSION) needs Node.js >= 20 (found $$(node --version)): install a newer nodejs"; exit 1; }
	npm install --prefix $(ALLURE_DIR) --no-audit --no-fund --save-exact allure@$(ALLURE_VERSION)

unit: python
	$(BIN)/pytest tests/unit -p no:cacheprovider

lab: setup
	$(BIN)/pytest tests/lab -p no:cacheprovider --own-labs-beside

lint: python
	$(BIN)/ruff check src lab/src tests fixtures suites conftest.py

types: python
	$(BIN)/mypy

bench: setup
	$(BIN)/lbconform bench lab

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache

# The two commands of the README, and the install steps they share. Every step is
# idempotent and only does what is missing, so a second run costs seconds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEBS   := iproute2 nftables conntrack tcpdump wrk util-linux procps
STAMP  := $(VENV)/.installed

.PHONY: run test setup debs python binaries unit lab lint types bench clean

run: setup
	$(BIN)/lbconform run

test: setup
	$(BIN)/pytest tests -p no:cacheprovider

setup: debs python binaries

debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

python: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

binaries: python
	$(BIN)/lbconform lab build

unit: python
	$(BIN)/pytest tests/unit -p no:cacheprovider

lab: setup
	$(BIN)/pytest tests/lab -p no:cacheprovider

lint: python
	$(BIN)/ruff check src tests fixtures suites conftest.py

types: python
	$(BIN)/mypy

bench: setup
	$(BIN)/lbconform bench lab

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache

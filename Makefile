# fm platform: `make demo` runs the main job, `make test` runs every test. Both set up .venv first.
VENV     ?= .venv
PYTHON   ?= python3
FM_HOME  ?= .fm
INPUT    ?=
SOURCE   ?= local
LICENSE  ?= NOASSERTION
TOKENIZER ?=
SEQ_LEN  ?= 2048
export FM_HOME

STAMP := $(VENV)/.installed-stamp
# Every install is from the lock (pinned versions + hashes, deploy/lock/, made by `make lock`
# from pyproject.toml): CI installs exactly what the image (deploy/Dockerfile) installs.
LOCK_DIR := deploy/lock
# checkov pins much of its stack: it gets a venv of its own (the deploy/ manifest tests use it).
DEPLOY_VENV  ?= .venv-deploy
DEPLOY_STAMP := $(DEPLOY_VENV)/.installed-stamp
# `make lock` runs the resolver (uv, pinned) from a venv of its own.
LOCK_VENV ?= .venv-lock
UV_VERSION := 0.13.8
# Debian packages the production-profile and browser tests need: Postgres server binaries
# (initdb, pg_ctl, pg_dump), Chromium (never a downloaded browser) and Prometheus (promtool checks
# the alert rules).
SYSTEM_PACKAGES := postgresql chromium prometheus

.PHONY: install install-system demo test test-fast lint dev clean lock

# --no-deps: the lock is the whole environment (pip check proves it complete); the project
# itself goes in editable, built with the locked setuptools.
$(STAMP): pyproject.toml $(LOCK_DIR)/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --require-hashes --no-deps -r $(LOCK_DIR)/dev.txt
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	$(VENV)/bin/pip check
	touch $(STAMP)

$(DEPLOY_STAMP): $(LOCK_DIR)/checkov.txt
	$(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install --quiet --require-hashes --no-deps -r $(LOCK_DIR)/checkov.txt
	$(DEPLOY_VENV)/bin/pip check
	touch $(DEPLOY_STAMP)

## Regenerate deploy/lock/ from pyproject.toml (after changing a dependency); commit the result.
lock:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet "uv==$(UV_VERSION)"
	$(LOCK_VENV)/bin/python $(LOCK_DIR)/lock.py

## Install what is missing of SYSTEM_PACKAGES (as root, e.g. in CI); a no-op when present.
install-system:
	@if { command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 \
		&& command -v chromium >/dev/null && command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES); \
	else echo "missing: $(SYSTEM_PACKAGES) (initdb, chromium, promtool); install them as root" >&2; exit 1; fi

install: $(STAMP) $(DEPLOY_STAMP) install-system

## The main job on embedded defaults: land INPUT (default: a generated sample), curate it,
## cut a version, pack MDS shards and read them back through fm_loader.
demo: install
	$(VENV)/bin/fm demo $(INPUT) \
		$(if $(INPUT),--source $(SOURCE) --license $(LICENSE)) \
		$(if $(TOKENIZER),--tokenizer $(TOKENIZER)) --seq-len $(SEQ_LEN)

## Every test: unit, Ray, Dagster and the end-to-end data checks on ../shared/data.
test: install lint
	$(VENV)/bin/python -m pytest

## Only the fast tests (no Ray, no end-to-end graph).
test-fast: install
	$(VENV)/bin/python -m pytest -m "not slow"

lint: install
	$(VENV)/bin/ruff check fm_assets fm_loader tests bench
	$(VENV)/bin/ruff format --check fm_assets fm_loader tests bench
	$(VENV)/bin/mypy

## The Dagster UI on this FM_HOME.
dev: install
	$(VENV)/bin/fm dev

clean:
	rm -rf $(FM_HOME)

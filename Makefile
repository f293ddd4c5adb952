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
# checkov pins much of its stack: it gets a venv of its own (the deploy/ manifest tests use it).
DEPLOY_VENV  ?= .venv-deploy
DEPLOY_STAMP := $(DEPLOY_VENV)/.installed-stamp
# Debian packages the production-profile and browser tests need: Postgres server binaries
# (initdb, pg_ctl) and Chromium, never a downloaded browser.
SYSTEM_PACKAGES := postgresql chromium

.PHONY: install install-system demo test test-fast lint dev clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip setuptools wheel
	$(VENV)/bin/pip install -e ".[dev]"
	touch $(STAMP)

$(DEPLOY_STAMP):
	$(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install --quiet "checkov>=3.2,<4"
	touch $(DEPLOY_STAMP)

## Install what is missing of SYSTEM_PACKAGES (as root, e.g. in CI); a no-op when present.
install-system:
	@if { command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 \
		&& command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES); \
	else echo "missing: $(SYSTEM_PACKAGES) (initdb, chromium); install them as root" >&2; exit 1; fi

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

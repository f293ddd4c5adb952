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

.PHONY: install demo test test-fast lint dev clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip setuptools wheel
	$(VENV)/bin/pip install -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

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

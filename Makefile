# Two entry points (see README): `make sample` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAMPLE_OUT ?= out/sample

.PHONY: setup sample test

setup: $(VENV)/.installed

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

sample: setup
	$(BIN)/python -m pipeline.run --stage=eval_sets \
	  --vl_checklist_root=samples/vl_checklist \
	  --aro_vga=samples/aro/visual_genome_attribution.json \
	  --output_dir=$(SAMPLE_OUT)

test: setup
	$(BIN)/python -m pytest -q tests

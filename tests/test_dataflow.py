"""Scaling out on Dataflow, checked as far as this machine goes (no Docker engine, no GCP, no GPU, no Hub).

- The worker image: the Dockerfile is parsed with dockerfile_parse, never built. dockerfile_problems() holds the
  checks; test_dockerfile_checks_catch feeds it edited copies, one per check, to show that each one can fail.
- The Dataflow commands of docs/runners.md: the ```bash blocks that follow `<!-- dataflow:gpu -->` / `<!-- dataflow:cpu -->`,
  split as a shell splits them. For each: every flag is known, Beam's option validation for the DataflowRunner is
  clean, the launcher's own checks (pipeline.run.parse) pass against a stand-in for GCS, and the stage's Beam graph
  is constructed with those options and never submitted. GPU commands must ask for a driver and a machine type that
  carries the GPUs they attach (accelerator_problems(), tried on edited commands too); CPU commands for none.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
from fnmatch import fnmatchcase

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import FileMetadata, MatchResult
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from conftest import REPO, SAMPLES, setup_arguments
from dockerfile_parse import DockerfileParser
from packaging.specifiers import SpecifierSet

from pipeline import run
from pipeline.options import HardposOptions, unknown_flags
from pipeline.sources.files import input_record

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
GPU_CONSTRAINTS = REPO / "docker" / "constraints-gpu.txt"
README = REPO / "docs" / "runners.md"  # the Dataflow commands, the image and its versions (moved from README.md)
BOOT = "/opt/apache/beam"
CUDA_BASE = re.compile(r"^(?:[\w.-]+/)*nvidia/cuda:\d+(?:\.\d+)*-(?:cudnn\d*-)?(?:runtime|devel)-ubuntu\d+\.\d+$")


# ---------------------------------------------------------------------------------------------------------------
# setup.py's arguments


SETUP = setup_arguments()
BEAM_SPEC = SpecifierSet(next(r for r in SETUP["extras_require"]["pipeline"]
                              if r.startswith("apache-beam"))[len("apache-beam"):])
PYTHON_SPEC = SpecifierSet(SETUP["python_requires"])


# ---------------------------------------------------------------------------------------------------------------
# Dockerfile


def _expand(text: str, variables: dict) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)


def parse_dockerfile(text: str) -> dict:
    """{"args": global ARG defaults, "stages": [{"image", "alias", "args", "instructions": [(KIND, value)]}]}."""
    structure = DockerfileParser(fileobj=io.BytesIO(text.encode("utf-8"))).structure
    global_args, stages = {}, []
    for item in structure:
        kind, value = item["instruction"], item["value"].strip()
        if kind == "FROM":  # FROM [--platform=...] image [AS name]
            m = re.fullmatch(r"(?:--\S+\s+)*(\S+)(?:\s+as\s+(\S+))?", value, flags=re.I)
            stages.append({"image": _expand(m.group(1), global_args), "alias": m.group(2),
                           "args": {}, "instructions": []})
        elif kind == "ARG":
            name, _, default = value.partition("=")
            name = name.strip()
            if not stages:
                global_args[name] = default.strip().strip('"')
            else:  # a stage sees a global ARG only where it declares it again
                stages[-1]["args"][name] = default.strip().strip('"') if default else global_args.get(name, "")
        elif stages and kind != "COMMENT":
            stages[-1]["instructions"].append((kind, value))
    return {"args": global_args, "stages": stages}


def _pip_installs(runs: list[str]) -> list[str]:
    """The `pip install ...` commands of the RUN lines (split at &&)."""
    return [part.strip() for run_line in runs for part in run_line.split("&&") if re.search(r"\bpip\b.*\binstall\b",
                                                                                              part)]


def dockerfile_problems(text: str, constraints_text: str, installed_beam: str) -> list[str]:
    """What keeps this Dockerfile from being a Dataflow worker image for this package; [] when nothing does.
    Each problem starts with the name of the check: base, python, beam, boot, entrypoint, venv, package, vllm,
    constraints, wordnet, secret."""
    problems = []
    parsed = parse_dockerfile(text)
    if not parsed["stages"]:
        return ["base: no FROM"]
    final = parsed["stages"][-1]
    py, beam_version = parsed["args"].get("PYTHON_VERSION", ""), parsed["args"].get("BEAM_VERSION", "")
    instructions = final["instructions"]
    runs = [_expand(v, final["args"]) for k, v in instructions if k == "RUN"]
    raw_runs = [v for k, v in instructions if k == "RUN"]

    if not CUDA_BASE.match(final["image"]):
        problems.append(f"base: the final stage starts from {final['image']!r}, not an nvidia/cuda runtime image")

    if not re.fullmatch(r"3\.\d+", py):
        problems.append(f"python: ARG PYTHON_VERSION={py!r} is not a Python major.minor")
    elif not PYTHON_SPEC.contains(f"{py}.0"):
        problems.append(f"python: ARG PYTHON_VERSION={py} is outside setup.py's python_requires {PYTHON_SPEC}")
    elif not any(re.search(rf"\bapt-get install\b.*\bpython{re.escape(py)}\b", r) for r in runs) or \
            not any(re.search(rf"\bpython{re.escape(py)} -m venv\b", r) for r in runs):
        problems.append(f"python: the final stage does not install python{py} and make its virtualenv with it")

    if beam_version != installed_beam:
        problems.append(f"beam: ARG BEAM_VERSION={beam_version!r}, but the launcher has apache-beam {installed_beam}")
    elif not BEAM_SPEC.contains(beam_version):
        problems.append(f"beam: ARG BEAM_VERSION={beam_version} is outside setup.py's apache-beam{BEAM_SPEC}")
    uses = {name for r in raw_runs for name in re.findall(r"\$\{?(PYTHON_VERSION|BEAM_VERSION)\b", r)}
    for name in sorted(uses - set(final["args"])):
        problems.append(f"beam: the final stage uses ${{{name}}} without declaring ARG {name} (it would be empty)")
    beam_pins = [re.search(r"apache-beam\[gcp\]==(\S+?)[\"']?(?:\s|$)", p) for p in _pip_installs(runs)
                 if "apache-beam" in p]
    if not beam_pins or not all(m and m.group(1) == beam_version for m in beam_pins):
        problems.append(f"beam: every pip install of apache-beam must pin apache-beam[gcp]=={beam_version}")

    boot_image = f"apache/beam_python{py}_sdk:{beam_version}"
    copies = []
    for kind, value in instructions:
        m = re.match(r"--from=(\S+)\s+(\S+)\s+(\S+)$", value) if kind == "COPY" else None
        if m and m.group(2).rstrip("/") == BOOT and m.group(3).rstrip("/") == BOOT:
            source = _expand(m.group(1), final["args"])
            stage = next((s for s in parsed["stages"][:-1] if s["alias"] == source), None)
            copies.append(stage["image"] if stage else source)
    if not any(c in (boot_image, f"docker.io/{boot_image}") for c in copies):
        problems.append(f"boot: no COPY --from={boot_image} {BOOT} {BOOT} in the final stage (found {copies})")

    entrypoints = [v for k, v in instructions if k == "ENTRYPOINT"]
    try:
        entrypoint = json.loads(entrypoints[-1]) if entrypoints else None
    except ValueError:
        entrypoint = entrypoints[-1]  # shell form: boot would not get Dataflow's arguments
    if entrypoint != [f"{BOOT}/boot"]:
        problems.append(f"entrypoint: ENTRYPOINT is {entrypoint!r}, not [\"{BOOT}/boot\"]")

    envs = " ".join(v for k, v in instructions if k == "ENV")
    if any(re.search(r"-m venv\b", r) for r in runs) and not re.search(r"\bRUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1\b",
                                                                        envs):
        problems.append("venv: the packages are in a virtualenv but RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 is not "
                        "set, so Beam's boot would start the SDK in a fresh virtualenv without them")

    sources = [value.split()[-1] for kind, value in instructions if kind == "COPY" and value.split()[0] == "."]
    extras = [set(m.group(2).split(",")) for p in _pip_installs(runs)
              for m in re.finditer(r"[\"']?(\S+?)\[([\w,-]+)\][\"']?", p) if m.group(1) in sources]
    if not any({"pipeline", "llm", "gcp", "spacy_model"} <= e for e in extras):
        problems.append(f"package: no pip install of the copied source ({sources}) with the pipeline, llm, gcp and "
                        f"spacy_model extras (found {extras})")

    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)\s*==\s*(\S+)", constraints_text, flags=re.M))
    if "vllm" not in pins:
        problems.append("vllm: the image's constraints do not pin vllm")
    if not any("vllm" in p for p in _pip_installs(runs)) and not any(r.startswith("vllm") for r in
                                                                       SETUP["extras_require"].get("llm", [])):
        problems.append("vllm: neither a pip install nor the llm extra brings vllm")

    copied = {value.split()[-1]: value.split()[0] for kind, value in instructions if kind == "COPY"
              and not value.startswith("--from")}
    used = {m.group(1) for p in _pip_installs(runs) for m in re.finditer(r"(?:-c|--constraint)[ =](\S+)", p)}
    if not used or any(copied.get(c) != "docker/constraints-gpu.txt" for c in used):
        problems.append(f"constraints: pip must install with -c docker/constraints-gpu.txt (copied in); "
                        f"found {sorted(used)} from {[copied.get(c) for c in sorted(used)]}")
    if re.search(r"^\s*torch\b", constraints_text, flags=re.M | re.I):
        problems.append("constraints: the image's constraints name torch; vLLM must choose its CUDA torch")

    apt = " ".join(r for r in runs if "apt-get install" in r)
    for package in ("wordnet-base", "wordnet-sense-index"):
        if not re.search(rf"\b{package}\b", apt):
            problems.append(f"wordnet: {package} is not apt-get installed")

    for kind, value in instructions + [("ARG", a) for a in parsed["args"]]:
        if kind in ("ENV", "ARG") and re.search(r"\b(HF_TOKEN|HUGGING_FACE_HUB_TOKEN)\b", value):
            problems.append(f"secret: {kind} {value.split()[0]} puts a Hub token into the image")
    if re.search(r"meta-llama|snapshot_download|huggingface-cli download|hf download", text):
        problems.append("secret: the image downloads or names a model; models are read at run time")
    return problems


def test_dockerfile_is_a_dataflow_gpu_worker_image():
    """CUDA base, Beam's boot copied from apache/beam_python<py>_sdk:<beam> and set as entrypoint, the launcher's
    Beam version, the package with the llm extra, vLLM pinned, WordNet, no constraints.txt, no token."""
    problems = dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8"), GPU_CONSTRAINTS.read_text(encoding="utf-8"),
                                   beam.__version__)
    assert problems == []


def test_dockerfile_versions_match_the_launcher_and_the_readme():
    parsed = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))
    py, beam_version = parsed["args"]["PYTHON_VERSION"], parsed["args"]["BEAM_VERSION"]
    assert beam_version == beam.__version__ and BEAM_SPEC.contains(beam_version)
    assert [s["image"] for s in parsed["stages"][:-1]] == [f"apache/beam_python{py}_sdk:{beam_version}"]
    readme = README.read_text(encoding="utf-8")
    assert f"apache/beam_python{py}_sdk:{beam_version}" in readme and f"Python {py}" in readme


DOCKERFILE_EDITS = [
    ("base", "ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04", "ARG CUDA_IMAGE=ubuntu:24.04"),
    ("boot", "_sdk:${BEAM_VERSION} AS beam_sdk", "_sdk:2.76.0 AS beam_sdk"),
    ("boot", "FROM apache/beam_python${PYTHON_VERSION}_sdk", "FROM apache/beam_python3.12_sdk"),
    ("boot", "COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam\n", ""),
    ("entrypoint", 'ENTRYPOINT ["/opt/apache/beam/boot"]', 'ENTRYPOINT ["python"]'),
    ("entrypoint", 'ENTRYPOINT ["/opt/apache/beam/boot"]', "ENTRYPOINT /opt/apache/beam/boot"),
    ("beam", "ARG BEAM_VERSION=2.77.0", "ARG BEAM_VERSION=2.76.0"),
    ("beam", "ARG PYTHON_VERSION\nARG BEAM_VERSION\n", "ARG PYTHON_VERSION\n"),
    ("beam", '"apache-beam[gcp]==${BEAM_VERSION}" "/opt', '"apache-beam[gcp]" "/opt'),
    ("venv", "    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 \\\n", ""),
    ("python", "ARG PYTHON_VERSION=3.11", "ARG PYTHON_VERSION=3.9"),
    ("python", "python${PYTHON_VERSION} -m venv", "python3 -m venv"),
    ("package", "[pipeline,llm,spacy_model,gcp]", "[pipeline,spacy_model,gcp]"),
    ("package", "[pipeline,llm,spacy_model,gcp]", "[llm,spacy_model,gcp]"),
    ("constraints", "COPY docker/constraints-gpu.txt", "COPY constraints.txt"),
    ("wordnet", "wordnet-base wordnet-sense-index", "wordnet-base"),
    ("secret", "WORKDIR /opt/hardpos\n", "WORKDIR /opt/hardpos\nENV HF_TOKEN=hf_abc\n"),
]


@pytest.mark.parametrize("check,old,new", DOCKERFILE_EDITS, ids=[f"{c}-{i}" for i, (c, _, _) in
                                                                 enumerate(DOCKERFILE_EDITS)])
def test_dockerfile_checks_catch(check, old, new):
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text, f"the edit no longer applies to the Dockerfile: {old!r}"
    problems = dockerfile_problems(text.replace(old, new), GPU_CONSTRAINTS.read_text(encoding="utf-8"),
                                   beam.__version__)
    assert any(p.startswith(f"{check}:") for p in problems), problems


@pytest.mark.parametrize("check,edit", [("vllm", lambda c: re.sub(r"(?m)^vllm==.*$", "", c)),
                                        ("constraints", lambda c: c + "torch==2.13.0\n")])
def test_dockerfile_checks_catch_constraint_edits(check, edit):
    constraints = GPU_CONSTRAINTS.read_text(encoding="utf-8")
    problems = dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8"), edit(constraints), beam.__version__)
    assert any(p.startswith(f"{check}:") for p in problems), problems


def test_dockerfile_check_catches_another_launcher_beam():
    problems = dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8"), GPU_CONSTRAINTS.read_text(encoding="utf-8"),
                                   "2.78.0")
    assert any(p.startswith("beam:") for p in problems), problems


def _dockerignored(path: str, patterns: list[str]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatchcase(prefix, pattern.strip("/")) for pattern in patterns for prefix in prefixes)


def test_dockerignore_keeps_out_local_state_and_keeps_what_the_install_reads():
    patterns = [line.strip() for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")]
    for path in (".venv/bin/python", "out/sample/report.json", "build/lib/pipeline/run.py", ".git/HEAD",
                 "pipeline/__pycache__/run.cpython-311.pyc", ".pytest_cache/v/x", ".ruff_cache/x",
                 "hardpos.egg-info/PKG-INFO"):
        assert _dockerignored(path, patterns), path
    for path in ("setup.py", "README.md", "pipeline/run.py", "pipeline/perturb/data/replace_table.json",
                 "schemas/train.json", "prompts/replace.txt", "docker/constraints-gpu.txt"):
        assert not _dockerignored(path, patterns), path


# ---------------------------------------------------------------------------------------------------------------
# The Dataflow commands of docs/runners.md

BLOCK = re.compile(r"<!-- dataflow:(gpu|cpu) -->\n```bash\n(.*?)```", re.S)
CPU_STAGES = {"eval_sets", "train_negatives", "order_eval", "train_set"}


def shell_words(script: str) -> list[str]:
    """The words of a one-command shell script: backslash-newline joins lines, quotes group, and an unquoted
    ; | & < > or parenthesis comes out as a word of its own (so a command the shell would split is noticed)."""
    lexer = shlex.shlex(script.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def readme_commands() -> list[tuple[str, list[str]]]:
    """(gpu|cpu, argv after `python -m pipeline.run`) for every marked block of docs/runners.md."""
    commands = []
    for kind, script in BLOCK.findall(README.read_text(encoding="utf-8")):
        words = shell_words(script)
        assert words[0].endswith("python") and words[1:3] == ["-m", "pipeline.run"], words[:3]
        assert not set(words) & set(";|&<>()"), f"the shell would split this command: {words}"
        commands.append((kind, words[3:]))
    return commands


COMMANDS = readme_commands()
IDS = [f"{kind}-{next(a for a in argv if a.startswith('--stage='))[8:]}-{i}" for i, (kind, argv) in
       enumerate(COMMANDS)]


def test_readme_has_gpu_and_cpu_dataflow_commands():
    kinds = [kind for kind, _ in COMMANDS]
    assert kinds.count("gpu") >= 1 and kinds.count("cpu") >= 1
    for _, argv in COMMANDS:
        assert "--runner=DataflowRunner" in argv
        assert not any(re.search(r"\b(PROJECT|BUCKET|REGION|TAG)\b", a) for a in argv), argv  # concrete values


def test_readme_builds_and_pushes_the_image_the_commands_use():
    images = {PipelineOptions(argv).get_all_options()["sdk_container_image"] for _, argv in COMMANDS}
    assert len(images) == 1, images
    image = images.pop()
    readme = README.read_text(encoding="utf-8")
    assert f"docker build -t {image} ." in readme and f"docker push {image}" in readme


@pytest.mark.parametrize("kind,argv", COMMANDS, ids=IDS)
def test_readme_command_flags_are_all_known(kind, argv):
    assert unknown_flags(argv) == []


@pytest.fixture
def no_gcs_network(monkeypatch):
    """Beam's validation asks GCS about the temp bucket's soft-delete policy where the gcp extra is installed: a
    warning only, and a network call; and nothing may be submitted."""
    monkeypatch.setattr(GoogleCloudOptions, "_warn_if_soft_delete_policy_enabled", lambda self, name: None,
                        raising=False)

    def no_submit(*args, **kwargs):
        raise AssertionError("a test tried to submit a Dataflow job")

    monkeypatch.setattr(DataflowRunner, "run_pipeline", no_submit)


@pytest.mark.parametrize("kind,argv", COMMANDS, ids=IDS)
def test_readme_command_passes_beam_validation_for_dataflow(kind, argv, no_gcs_network):
    options = PipelineOptions(argv)
    assert options.get_all_options()["runner"] == "DataflowRunner"
    assert PipelineOptionsValidator(options, DataflowRunner()).validate() == []


def test_option_checks_catch_broken_commands(no_gcs_network):
    argv = COMMANDS[0][1]
    assert unknown_flags([*argv, "--machine-type=n2-standard-8"]) == ["--machine-type=n2-standard-8"]
    broken = PipelineOptions(_edited(_edited(argv, "--project", "123456"), "--job_name", "Hard_Pos"))
    assert len(PipelineOptionsValidator(broken, DataflowRunner()).validate()) == 2


class FakeGcs:
    """Stands in for Beam's GCS filesystem: serves the objects it is given, records every call, and fails any call
    it does not implement, so a test sees exactly what touches gs://."""

    def __init__(self, objects: dict[str, bytes]):
        self.objects, self.calls = objects, []

    def join(self, basepath, *paths):
        path = basepath
        for p in paths:
            path = path.rstrip("/") + "/" + p.lstrip("/")
        return path

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def exists(self, path):
        self.calls.append(("exists", path))
        return path in self.objects or any(k.startswith(path.rstrip("/") + "/") for k in self.objects)

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        self.calls.append(("open", path))
        if path not in self.objects:
            raise FileNotFoundError(path)
        return io.BytesIO(self.objects[path])

    def match(self, patterns, limits=None):
        self.calls.extend(("match", p) for p in patterns)
        return [MatchResult(p, [FileMetadata(k, len(v)) for k, v in sorted(self.objects.items()) if fnmatchcase(k, p)])
                for p in patterns]

    def __getattr__(self, name):
        raise AssertionError(f"FileSystems.{name} on gs:// at the launcher")


@pytest.fixture
def fake_gcs(monkeypatch):
    """fake_gcs(objects) -> FakeGcs, answering for gs:// paths in FileSystems; other paths as usual."""
    real = FileSystems.get_filesystem

    def install(objects):
        gcs = FakeGcs(objects)
        monkeypatch.setattr(FileSystems, "get_filesystem",
                            staticmethod(lambda path: gcs if FileSystems.get_scheme(path) == "gs" else real(path)))
        return gcs

    return install


def recorded_tables(output_dir: str, made_from: dict) -> dict[str, bytes]:
    """train_set's two input tables in output_dir as a committed run leaves them: a shard each, and report.json
    recording their sha256 and what they were made from."""
    shard = b"PAR1"
    objects, tables = {}, {}
    for table in ("hard_positives", "train_negatives"):
        relative = f"{table}/train-00000-of-00001.parquet"
        objects[f"{output_dir}/{relative}"] = shard
        tables[table] = {"shards": {relative: 1}, "sha256": {relative: hashlib.sha256(shard).hexdigest()},
                         "made_from": made_from}
    objects[f"{output_dir}/report.json"] = json.dumps({"tables": tables}).encode()
    return objects


@pytest.mark.parametrize("kind,argv", COMMANDS, ids=IDS)
def test_readme_command_passes_the_launcher_checks_and_builds_the_graph(kind, argv, no_gcs_network, fake_gcs):
    """pipeline.run.parse (input checks: the captions file is listed and read from "GCS"), then the stage's graph
    with the DataflowRunner, constructed and not run. At construction the captions file is listed again (its read
    units), and train_set reads the records of its two input tables in report.json (their shards' sha256, checked
    against the files there, and the sha256 of the captions they were made from, checked against its own); no
    shard is read (the workers read and check those)."""
    opts = PipelineOptions(argv).view_as(HardposOptions)
    captions = SAMPLES / "coco" / "captions_sample.json"
    objects = {opts.coco_captions: captions.read_bytes()}
    tables, opened = [], {opts.coco_captions}
    if opts.stage == "train_set":
        objects.update(recorded_tables(opts.output_dir, input_record({"coco_captions": str(captions)}, opts)))
        tables = [f"{opts.output_dir}/{table}/*.parquet" for table in ("hard_positives", "train_negatives")]
        opened.add(f"{opts.output_dir}/report.json")
    gcs = fake_gcs(objects)

    options, opts = run.parse(argv)
    assert {path for call, path in gcs.calls if call == "open"} == {opts.coco_captions}
    # the launcher lists the captions pattern's files (their sizes plan the read units) and reads no other path
    assert {path for call, path in gcs.calls if call == "match"} == {opts.coco_captions}

    gcs.calls.clear()
    pipeline = beam.Pipeline(options=options)  # runs Beam's option validation for the DataflowRunner again
    run.STAGES[opts.stage].build(pipeline, opts)
    # the read units come from the captions pattern's listing and the files' heads, never their records
    assert {path for call, path in gcs.calls if call == "match"} == set(tables) | {opts.coco_captions}
    assert {path for call, path in gcs.calls if call == "open"} <= opened | {opts.coco_captions}
    assert isinstance(pipeline.runner, DataflowRunner)


# GPUs each machine type carries: (accelerator type, count); n1 machines take T4/V100/P100/P4 in 1, 2, 4 (or 8).
def machine_gpus(machine: str) -> tuple[str, int] | None:
    g2 = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1, "g2-standard-32": 1,
          "g2-standard-24": 2, "g2-standard-48": 4, "g2-standard-96": 8}
    if machine in g2:
        return "nvidia-l4", g2[machine]
    for pattern, gpu in ((r"a2-highgpu-(\d+)g", "nvidia-tesla-a100"), (r"a2-megagpu-(\d+)g", "nvidia-tesla-a100"),
                         (r"a2-ultragpu-(\d+)g", "nvidia-a100-80gb"), (r"a3-(?:high|mega|edge)gpu-(\d+)g",
                                                                       "nvidia-h100-80gb")):
        m = re.fullmatch(pattern, machine)
        if m:
            return gpu, int(m.group(1))
    return None


N1_GPUS = {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"}
ACCELERATOR = re.compile(r"worker_accelerator=type:([a-z0-9-]+);count:(\d+);install-nvidia-driver(?::[\w.]+)?")


def accelerator_problems(kind: str, argv: list[str]) -> list[str]:
    """A GPU command must attach GPUs with the driver, on a machine type that carries them, to a stage that uses
    them, all of them for one model copy, one harness thread per process; a CPU command attaches none."""
    options = PipelineOptions(argv)
    everything = options.get_all_options()
    opts = options.view_as(HardposOptions)
    service = everything.get("dataflow_service_options") or []
    accelerators = [s for s in service if s.startswith("worker_accelerator")]
    machine = everything.get("machine_type") or ""
    problems = []
    if not everything.get("sdk_container_image"):
        problems.append("no --sdk_container_image: Beam's default image has neither this package nor its models")
    if kind == "cpu":
        if accelerators:
            problems.append(f"a CPU command attaches {accelerators}")
        if machine_gpus(machine):
            problems.append(f"a CPU command asks for the GPU machine type {machine}")
        if opts.stage not in CPU_STAGES:
            problems.append(f"--stage={opts.stage} is not a CPU stage")
        return problems
    if opts.stage not in ("hard_positives", "all") or not (
            opts.llm_engine == "vllm" or (opts.llm_engine == "transformers" and opts.llm_device == "cuda")):
        problems.append(f"--stage={opts.stage} --llm_engine={opts.llm_engine} does not use the GPUs")
    matches = [ACCELERATOR.fullmatch(a) for a in accelerators]
    if len(accelerators) != 1 or not matches[0]:
        return problems + [f"want one worker_accelerator=type:T;count:N;install-nvidia-driver, got {accelerators}"]
    gpu, count = matches[0].group(1), int(matches[0].group(2))
    carried = machine_gpus(machine)
    if carried is None and not (gpu in N1_GPUS and machine.startswith("n1-") and count in (1, 2, 4, 8)):
        problems.append(f"{machine!r} cannot carry {count} x {gpu}")
    elif carried is not None and carried != (gpu, count):
        problems.append(f"{machine} carries {carried[1]} x {carried[0]}, the command attaches {count} x {gpu}")
    if opts.llm_engine == "vllm" and opts.tensor_parallel_size != count:
        problems.append(f"--tensor_parallel_size={opts.tensor_parallel_size} with {count} GPUs: one model copy per "
                        f"worker (large_model) should span all of them")
    if everything.get("number_of_worker_harness_threads") != 1:
        problems.append("want --number_of_worker_harness_threads=1")
    return problems


@pytest.mark.parametrize("kind,argv", COMMANDS, ids=IDS)
def test_readme_command_asks_for_the_right_workers(kind, argv):
    assert accelerator_problems(kind, argv) == []


def _edited(argv: list[str], flag: str, value: str | None) -> list[str]:
    kept = [a for a in argv if not a.startswith(f"{flag}=")]
    return kept if value is None else [*kept, f"{flag}={value}"]


GPU_EDITS = [
    ("--dataflow_service_options", "worker_accelerator=type:nvidia-a100-80gb;count:4", "worker_accelerator"),
    ("--dataflow_service_options", None, "worker_accelerator"),
    ("--machine_type", "g2-standard-8", "carries"),
    ("--machine_type", "a2-ultragpu-2g", "carries"),
    ("--machine_type", "n2-standard-8", "cannot carry"),
    ("--tensor_parallel_size", "2", "tensor_parallel_size"),
    ("--number_of_worker_harness_threads", "12", "harness_threads"),
    ("--llm_engine", "openai", "does not use the GPUs"),
    ("--sdk_container_image", None, "sdk_container_image"),
]


@pytest.mark.parametrize("flag,value,expected", GPU_EDITS, ids=[f"{f[2:]}-{i}" for i, (f, _, _) in
                                                                enumerate(GPU_EDITS)])
def test_accelerator_check_catches(flag, value, expected):
    argv = next(a for kind, a in COMMANDS if kind == "gpu" and "--machine_type=a2-ultragpu-4g" in a)
    problems = accelerator_problems("gpu", _edited(argv, flag, value))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("flag,value,expected", [
    ("--dataflow_service_options", "worker_accelerator=type:nvidia-l4;count:1;install-nvidia-driver", "attaches"),
    ("--machine_type", "g2-standard-8", "GPU machine type"),
    ("--stage", "hard_positives", "not a CPU stage"),
])
def test_cpu_check_catches(flag, value, expected):
    argv = next(a for kind, a in COMMANDS if kind == "cpu")
    problems = accelerator_problems("cpu", _edited(argv, flag, value))
    assert any(expected in p for p in problems), problems


def test_a_corpus_pattern_builds_the_dataflow_graph_without_submitting(no_gcs_network, fake_gcs):
    """The README's CPU train_negatives command with a corpus pattern (--captions=gs://.../part-*.jsonl, two files)
    instead of a COCO file: the launcher's checks pass, the job graph is built for the DataflowRunner and turned into
    the job's proto, and nothing is submitted (no_gcs_network refuses a submit). The launcher lists the pattern and
    reads no record: the workers read the files."""
    kind, argv = next((k, a) for k, a in COMMANDS if k == "cpu" and "--stage=train_negatives" in a)
    bucket = next(a.split("=", 1)[1] for a in argv if a.startswith("--output_dir=")).rsplit("/", 1)[0]
    pattern = f"{bucket}/corpus/part-*.jsonl"
    annotations = json.loads((SAMPLES / "coco" / "captions_sample.json").read_text())["annotations"]
    lines = [json.dumps({"key": str(a.get("id")), "caption": a.get("caption"), "url": f"https://x/{a.get('id')}.jpg"})
             for a in annotations if isinstance(a, dict)]
    objects = {f"{bucket}/corpus/part-{i}.jsonl": "\n".join(lines[i::2]).encode() + b"\n" for i in range(2)}
    argv = [a for a in argv if not a.startswith("--coco_captions=")] + [f"--captions={pattern}",
                                                                          "--captions_format=jsonl"]
    gcs = fake_gcs(objects)
    options, opts = run.parse(argv)
    pipeline = beam.Pipeline(options=options)
    run.STAGES[opts.stage].build(pipeline, opts)
    assert isinstance(pipeline.runner, DataflowRunner)
    labels = {t.unique_name for t in pipeline.to_runner_api().components.transforms.values()}
    assert any("ReadCaptions" in label for label in labels) and any("ParseAndGenerate" in label for label in labels)
    assert set(gcs.calls) == {("match", pattern)}  # listed (sizes plan the read units), never opened here

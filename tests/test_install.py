"""The install is reproducible: requirements-cpu.txt pins every package of the environment that make setup builds,
and setup.py's ranges admit the pinned versions."""
import re
import site
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline.run import PIPELINE_EXTRA
from tests.conftest import REPO, setup_arguments
from tests.not_installed import PIPELINE_ONLY

LOCK = REPO / "requirements-cpu.txt"


def pins() -> dict[str, str]:
    found = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
        assert m, f"not an exact pin: {line!r}"
        found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def test_the_lock_pins_every_installed_package_at_its_installed_version():
    locked = pins()
    site_packages = {Path(p).resolve() for p in site.getsitepackages()}  # not a package's vendored copies
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()
                 if Path(d.locate_file("")).resolve() in site_packages}
    installed = {n: v for n, v in installed.items() if n not in ("hardpos", "pip", "setuptools", "wheel")}
    assert set(installed) - set(locked) == set(), "installed but not locked (run make lock)"
    assert {n: (locked[n], v) for n, v in installed.items() if locked[n] != v} == {}


def test_setup_py_admits_the_locked_versions_and_the_test_extra_is_built_from_the_others():
    kw = setup_arguments()
    locked = pins()
    extras = kw["extras_require"]
    requirements = [Requirement(r) for r in kw["install_requires"]]
    requirements += [Requirement(r) for name in ("pipeline", "hf", "train", "eval", "images", "dask", "test")
                     for r in extras[name]]
    for req in requirements:
        version = locked[canonicalize_name(req.name)]
        assert req.specifier.contains(version.split("+")[0], prereleases=True), (str(req), version)
    assert {canonicalize_name(r.name) for r in requirements} >= {"pyyaml", "img2dataset", "open-clip-torch"}
    for name in ("img2dataset", "open_clip_torch"):  # the code patches their internals: an upper bound
        [spec] = [Requirement(r).specifier for extra in extras.values() for r in extra if r.startswith(name)][:1]
        assert any(s.operator == "<" for s in spec), (name, spec)
    for extra in ("pipeline", "hf", "train", "eval", "images", "dask"):
        assert set(extras[extra]) <= set(extras["test"]), extra


def test_a_training_machine_installs_no_beam_spacy_or_nltk():
    """install_requires and the train extra leave out the pipeline's own packages (the tests that train and evaluate
    where they cannot be imported: test_finetune.py, test_evaluate.py); the pipeline extra holds every package whose
    absence pipeline.run names in its one line."""
    kw = setup_arguments()
    names = {name: {canonicalize_name(Requirement(r).name) for r in requirements}
             for name, requirements in [("install_requires", kw["install_requires"]), *kw["extras_require"].items()]}
    pipeline_only = {canonicalize_name(module) for module in PIPELINE_ONLY}  # apache_beam: apache-beam
    assert pipeline_only == {"apache-beam", "spacy", "nltk"}
    assert names["install_requires"] & pipeline_only == set()
    assert names["train"] & pipeline_only == set()
    assert pipeline_only | {canonicalize_name(d) for d in PIPELINE_EXTRA.values()} <= names["pipeline"]
    assert not any(s.operator in ("<", "<=") for r in kw["install_requires"] for s in Requirement(r).specifier)

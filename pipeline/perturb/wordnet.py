"""WordNet 3.0 through NLTK: found in NLTK's own data, else built once from Debian's WordNet files.

NLTK's reader needs a `lexnames` file that Debian's `wordnet-base` does not ship, so the Debian files are
copied into a cache folder next to a generated `lexnames` (NLTK refuses symlinked data on some setups).
"""
from __future__ import annotations

import functools

import gzip
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

DEBIAN_DIR = Path("/usr/share/wordnet")
DEBIAN_LEXNAMES = Path("/usr/share/man/man5/lexnames.5WN.gz")
# What NLTK's WordNetCorpusReader opens (lexnames is generated).
NEEDED = ("index.noun", "index.verb", "index.adj", "index.adv", "data.noun", "data.verb", "data.adj",
          "data.adv", "noun.exc", "verb.exc", "adj.exc", "adv.exc", "cntlist.rev", "index.sense")
_POS_NUMBER = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}
_LEXNAME_LINE = re.compile(r"^(\d\d)\s+((adj|adv|noun|verb)\.\S+)")

HOW_TO_GET = ("WordNet 3.0 not found. Either `python -c \"import nltk; nltk.download('wordnet')\"` "
              "(NLTK's data), or on Debian/Ubuntu `apt-get install wordnet-base wordnet-sense-index` "
              "(hardpos builds NLTK's layout from /usr/share/wordnet itself).")


class WordNetMissing(RuntimeError):
    pass


def cache_root() -> Path:
    """Where the Debian files are laid out for NLTK: $HARDPOS_NLTK_DATA, else ~/.cache/hardpos/nltk_data."""
    env = os.environ.get("HARDPOS_NLTK_DATA")
    return Path(env) if env else Path.home() / ".cache" / "hardpos" / "nltk_data"


# WordNet 3.0's lexicographer files 00..44, as lexnames(5WN) lists them: the fallback where the man page
# is not installed (minimal images often drop /usr/share/man).
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition "
    "noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
    "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession "
    "verb.social verb.stative verb.weather adj.ppl").split()


def lexnames_text(man_page: Path = DEBIAN_LEXNAMES) -> str:
    """NLTK's lexnames file ("NN<TAB>noun.animal<TAB>1" per line) from the lexnames(5WN) man page."""
    names = []
    if man_page.is_file():
        with gzip.open(man_page, "rt", encoding="utf-8", errors="replace") as f:
            names = [m.group(2) for m in map(_LEXNAME_LINE.match, f) if m]
    if len(names) != len(LEXNAMES):
        names = LEXNAMES
    return "".join(f"{i:02d}\t{name}\t{_POS_NUMBER[name.split('.')[0]]}\n" for i, name in enumerate(names))


def build_from_debian(root: Path, debian_dir: Path = DEBIAN_DIR, man_page: Path = DEBIAN_LEXNAMES) -> Path:
    """Lay out <root>/corpora/wordnet from Debian's files (atomically: concurrent workers may race)."""
    target = root / "corpora" / "wordnet"
    if (target / "lexnames").exists():
        return target
    missing = [name for name in NEEDED if not (debian_dir / name).is_file()]
    if missing:
        raise WordNetMissing(HOW_TO_GET + f" (missing under {debian_dir}: {', '.join(missing)})")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=target.parent))
    try:
        for name in NEEDED:
            shutil.copyfile(debian_dir / name, staging / name)
        (staging / "lexnames").write_text(lexnames_text(man_page), encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:
            if not (target / "lexnames").exists():  # lost the race to a worker that finished: fine
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def wordnet_available() -> bool:
    import nltk

    for name in ("corpora/wordnet", "corpora/wordnet.zip/wordnet/"):
        try:
            nltk.data.find(name)
            return True
        except LookupError:
            pass
    return (cache_root() / "corpora" / "wordnet" / "lexnames").exists() or \
        all((DEBIAN_DIR / name).is_file() for name in NEEDED)


@functools.lru_cache(maxsize=1)
def load_wordnet():
    """An NLTK WordNetCorpusReader: NLTK's installed data first, else the Debian layout in cache_root(). One per
    process: reading the index takes seconds, and every stage's DoFns and validators use the same read-only data."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class EnglishWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # NLTK maps every synset to WordNet 3.0 for the multilingual (OMW) data at start-up, about half of the
            # load time; with no OMW reader that map is never read.
            return None if self._omw_reader is None else super().map_wn(version)

    try:
        path = nltk.data.find("corpora/wordnet")
    except LookupError:
        try:
            path = nltk.data.find("corpora/wordnet.zip/wordnet/")
        except LookupError:
            root = cache_root()
            build_from_debian(root)
            # NLTK only opens data under nltk.data.path (its path-security check).
            if str(root) not in nltk.data.path:
                nltk.data.path.append(str(root))
            path = nltk.data.find("corpora/wordnet")
    with warnings.catch_warnings():  # "multilingual functions are not available": we use English only
        warnings.simplefilter("ignore", UserWarning)
        return EnglishWordNet(path, None)

"""Makes modules unfindable in this interpreter, installed or not, as on a machine whose setup left them out: every
meta-path finder finds none of them, so `import spacy` fails with ModuleNotFoundError, importlib.util.find_spec("spacy")
is None and sys.modules holds no entry for them. (A None entry in sys.modules blocks the import too, but libraries
read the key as "imported": datasets' pickler imports spacy whenever "spacy" is there.)"""
from __future__ import annotations

import sys

# What a machine with only the train or eval extra lacks (setup.py's pipeline extra): tables, trainer and evaluator
# import none of them.
PIPELINE_ONLY = ("apache_beam", "spacy", "nltk")


class _Hiding:
    """A meta-path finder that finds what the one it wraps finds, but for the hidden top-level names."""

    def __init__(self, finder, hidden: tuple[str, ...]):
        self.finder, self.hidden = finder, hidden

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attribute):  # find_distributions, invalidate_caches, ...
        return getattr(self.finder, attribute)


def hide(hidden: tuple[str, ...] = PIPELINE_ONLY) -> None:
    assert not set(hidden) & set(sys.modules), "hide them before anything imports them"
    sys.meta_path[:] = [_Hiding(finder, hidden) for finder in sys.meta_path]

"""Where the data files shipped with the project live, in a checkout and in an installed package."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """`schemas` or `prompts`: top-level folders of the repo, installed as pipeline/_<name> by setup.py."""
    for candidate in (_PACKAGE / f"_{name}", _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cannot find the {name}/ folder next to {_PACKAGE}")

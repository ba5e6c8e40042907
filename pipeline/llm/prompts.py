"""Prompt templates from prompts/*.txt, which captions get which prompt, and the chat format around them.

A template is plain text with one `{caption}` slot; its sha256 (of the file's bytes) goes into every output
row and into the cache key, so an edited prompt never reuses results made with the old one.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache

from pipeline.resources import resource_dir

# positive type -> (template file, max new tokens: the paper's 30 for REPLACE and 20 for SWAP)
POSITIVE_TYPES = {
    "replace": ("replace.txt", 30),
    "swap": ("swap.txt", 20),
    "replace_verb": ("replace_verb.txt", 30),               # the paper's relation-targeted variants
    "replace_preposition": ("replace_preposition.txt", 30),
}
CHAT_FORMATS = ("llama2", "none")
SWAP_MAX_WORDS = 15  # SWAP is asked only for captions with "and" and fewer than this many words
_WORD = re.compile(r"\w+(?:'\w+)?")
# Spatial prepositions the preposition variant targets (the same words the replace negatives contrast).
SPATIAL = frozenset("on in under above below behind beside near over inside outside atop beneath underneath "
                    "between next front top against along across into onto around by".split())


@dataclass(frozen=True)
class Prompt:
    positive_type: str
    template: str
    sha256: str
    max_new_tokens: int

    def render(self, caption: str, chat_format: str = "llama2") -> str:
        user = self.template.rstrip("\n").replace("{caption}", caption)
        if chat_format == "none":
            return user
        # Llama-2-chat: the tokenizer adds <s>; no system prompt (the paper used none).
        return f"[INST] {user} [/INST]"


@cache
def load_prompt(positive_type: str) -> Prompt:
    if positive_type not in POSITIVE_TYPES:
        raise ValueError(f"unknown positive type {positive_type!r}; choose from {', '.join(POSITIVE_TYPES)}")
    file, max_new_tokens = POSITIVE_TYPES[positive_type]
    data = (resource_dir("prompts") / file).read_bytes()
    text = data.decode("utf-8")
    if text.count("{caption}") != 1:
        raise ValueError(f"prompts/{file} must contain exactly one {{caption}} slot")
    return Prompt(positive_type, text, hashlib.sha256(data).hexdigest(), max_new_tokens)


def caption_words(caption: str) -> list[str]:
    return _WORD.findall(caption.lower())


def wants(positive_type: str, caption: str) -> bool:
    """Whether this caption gets this prompt: REPLACE for every caption; SWAP only with the word "and" and
    fewer than 15 words (the paper's rule); the preposition variant only with a spatial preposition."""
    words = caption_words(caption)
    if positive_type == "swap":
        return "and" in words and len(words) < SWAP_MAX_WORDS
    if positive_type == "replace_preposition":
        return any(w in SPATIAL for w in words)
    return bool(words)

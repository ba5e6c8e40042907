"""Prompt templates from prompts/, which captions get which prompt, and the chat formats around them.

Two sets of hard-positive prompts (--prompt_set):
- paper (default): prompts/*.txt, the paper's appendix; one `{caption}` slot; the line breaks of the file kept.
- released: prompts/released/*.txt, the four templates of the authors' released generation script
  (generate_hard_positives.py in amitakamath/hard_positives), verbatim, with its `{example}` slot, rendered as the
  script renders them: `template.format(example=caption).strip()`.
And the LLM hard negatives (prompts/negatives/*.txt, written from SugarCrepe's prompts; prompts/negatives/SOURCES.md).

A template's sha256 (of the file's bytes) goes into every output row and into the cache key, so an edited
prompt never reuses results made with the old one. The chat format (--chat_format) says how the engine sends
the rendered text: auto (the model's own chat template: tokenizer.apply_chat_template, vLLM's LLM.chat, an
OpenAI-compatible /chat/completions), none (the raw text as a completion, as the released script does) or
llama2 (a hand-written Llama-2-chat [INST] ... [/INST] completion).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache

from pipeline.resources import resource_dir

PROMPT_SETS = ("paper", "released")
CHAT_FORMATS = ("auto", "none", "llama2")
# positive type -> (template file, max new tokens) per prompt set: the paper's 30 for REPLACE and 20 for SWAP; the
# released script's --max-new-tokens default, 20, for all.
POSITIVE_PROMPTS = {
    "paper": {
        "replace": ("replace.txt", 30),
        "swap": ("swap.txt", 20),
        "replace_verb": ("replace_verb.txt", 30),               # the paper's relation-targeted variants
        "replace_preposition": ("replace_preposition.txt", 30),
    },
    "released": {
        "replace": ("released/replace.txt", 20),
        "swap": ("released/swap.txt", 20),
        "replace_verb": ("released/replace_verb.txt", 20),
        "replace_preposition": ("released/replace_spatial.txt", 20),  # the script's REPLACE_SPATIAL
    },
}
POSITIVE_TYPES = tuple(POSITIVE_PROMPTS["paper"])
# LLM hard negatives (SugarCrepe's five kinds): negative type -> (template file, max new tokens).
NEGATIVE_PROMPTS = {
    "llm_replace_obj": ("negatives/replace_obj.txt", 40),
    "llm_replace_att": ("negatives/replace_att.txt", 40),
    "llm_replace_rel": ("negatives/replace_rel.txt", 40),
    "llm_swap_obj": ("negatives/swap_obj.txt", 40),
    "llm_swap_att": ("negatives/swap_att.txt", 40),
}
LLM_NEGATIVE_TYPES = tuple(NEGATIVE_PROMPTS)
SWAP_MAX_WORDS = 15  # SWAP is asked only for captions with "and" and fewer than this many words
_WORD = re.compile(r"\w+(?:'\w+)?")
# Spatial prepositions the preposition variant targets (the same words the replace negatives contrast).
SPATIAL = frozenset("on in under above below behind beside near over inside outside atop beneath underneath "
                    "between next front top against along across into onto around by".split())


@dataclass(frozen=True)
class Prompt:
    kind: str               # a positive type or an LLM negative type
    prompt_set: str         # paper, released, or negatives
    template: str
    sha256: str
    max_new_tokens: int

    def text(self, caption: str) -> str:
        """The rendered prompt: the user message, or the whole completion with --chat_format=none."""
        if self.prompt_set == "released":
            return self.template.format(example=caption).strip()
        return self.template.rstrip("\n").replace("{caption}", caption)


def completion(text: str, chat_format: str) -> str:
    """The text an engine sends as a plain completion for the chat formats that are not the model's own."""
    if chat_format == "llama2":
        # Llama-2-chat: the tokenizer adds <s>; no system prompt (the paper used none).
        return f"[INST] {text} [/INST]"
    return text


@cache
def load_prompt(kind: str, prompt_set: str = "paper") -> Prompt:
    if kind in NEGATIVE_PROMPTS:
        file, max_new_tokens = NEGATIVE_PROMPTS[kind]
        prompt_set, slot = "negatives", "{caption}"
    elif prompt_set not in POSITIVE_PROMPTS:
        raise ValueError(f"unknown prompt set {prompt_set!r}; choose from {', '.join(PROMPT_SETS)}")
    elif kind not in POSITIVE_PROMPTS[prompt_set]:
        raise ValueError(f"unknown positive type {kind!r}; choose from {', '.join(POSITIVE_TYPES)}")
    else:
        file, max_new_tokens = POSITIVE_PROMPTS[prompt_set][kind]
        slot = "{example}" if prompt_set == "released" else "{caption}"
    data = (resource_dir("prompts") / file).read_bytes()
    text = data.decode("utf-8")
    if text.count(slot) != 1 or text.count("{") != 1 or text.count("}") != 1:
        raise ValueError(f"prompts/{file} must contain exactly one {slot} slot and no other braces")
    return Prompt(kind, prompt_set, text, hashlib.sha256(data).hexdigest(), max_new_tokens)


def caption_words(caption: str) -> list[str]:
    return _WORD.findall(caption.lower())


def wants(kind: str, caption: str) -> bool:
    """Whether this caption gets this prompt: REPLACE for every caption; SWAP only with the word "and" and
    fewer than 15 words (the paper's rule); the preposition variant only with a spatial preposition. Of the
    negatives, every caption gets every kind (SugarCrepe asks each caption for each)."""
    words = caption_words(caption)
    if kind == "swap":
        return "and" in words and len(words) < SWAP_MAX_WORDS
    if kind == "replace_preposition":
        return any(w in SPATIAL for w in words)
    return bool(words)

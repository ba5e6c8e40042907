"""A photo frame that opens a caption ("A photo of ...", "An image showing ...", "A black and white picture of ...")
and the scene it frames as a caption of its own, so that the structure rules rewrite the scene and keep the frame:
"A photo of a man riding a horse" -> "A photo of a horse ridden by a man".

Only frames of the whole scene: "a close up of a pizza on a table" is of the pizza, and "a close up of a table with
a pizza on it" of the table (two readers, round 8), so no close shot is a frame here. The scene must be one noun
phrase that the frame's "of" or "showing" governs, to the caption's end: a sentence after a frame ("a photo of a man
is riding") is no caption to rewrite.

Plain Python over spaCy tokens (no Beam, no I/O).
"""
from __future__ import annotations

from dataclasses import dataclass

from spacy.tokens import Doc

from pipeline.perturb.phrases import NOUN_TAGS
from pipeline.perturb.units import sentence_cased

# Nouns that frame the whole scene (a painting or drawing depicts it as a photo does).
SCENE_FRAMES = frozenset("""photo photos picture pictures image images photograph photographs snapshot snapshots shot
view scene painting drawing""".split())
# The word after the frame that hands over to the scene.
FRAME_LINKS = frozenset({"of", "showing", "depicting", "shows"})
# Words before the frame noun that leave it a frame of the scene ("a", "this is a", "a black and white", "an old").
FRAME_OPENING_TAGS = frozenset({"DT", "JJ", "CC", "RB", "EX", "VBZ", "HYPH"})
CLOSE = frozenset({"close", "closeup", "close-up", "up", "closer"})
# The words a framed scene must not gain: a verb that makes the noun phrase a sentence ("a photo of a cat is on a
# couch"; in a relative clause it is the phrase's: "a cat that is on a couch"), or "there is" inside the frame.
SENTENCE_WORDS = frozenset({"is", "are", "there"})
RELATIVE_PRONOUNS = frozenset({"who", "that", "which"})


@dataclass(frozen=True)
class FramedScene:
    prefix: str   # the caption's characters before the scene: "A photo of "
    scene: Doc    # the scene as a parsed caption of its own: "a man riding a horse."


def frame_link(doc, close_shots: bool = False):
    """The "of" / "showing" of the scene frame the caption opens with ("A black and white photo of"), else None;
    with close_shots, also of a close shot ("A close up of")."""
    frames = SCENE_FRAMES | CLOSE if close_shots else SCENE_FRAMES
    link = next((t for t in doc[:8] if t.lower_ in FRAME_LINKS), None)
    if link is None or link.i < 1 or link.i + 1 >= len(doc):
        return None
    frame = doc[link.i - 1]
    if frame.lower_ not in frames or link.head.i != frame.i and frame.head.i != link.i:
        return None
    opening = doc[:frame.i]
    if any((t.lower_ in CLOSE and not close_shots) or
           (t.tag_ not in FRAME_OPENING_TAGS and t.lower_ not in CLOSE | {"black", "white"})
           for t in opening) or any(t.tag_ == "VBZ" and t.lower_ not in ("is", "'s") for t in opening):
        return None
    return link


def framed_scene(doc) -> FramedScene | None:
    """The caption's opening frame and the scene after it, or None where the caption opens with no scene frame."""
    link = frame_link(doc)
    if link is None:
        return None
    frame = doc[link.i - 1]
    start = link.i + 1
    if any(t.head.i == t.i for t in doc[start:]):
        return None  # the caption's root inside the scene: a sentence after the frame
    outside = {t.i for t in doc[start:] if t.head.i < start}
    main = [doc[i] for i in sorted(outside) if doc[i].head.i == link.i and doc[i].dep_ in ("pobj", "dobj")]
    if len(main) != 1 or main[0].tag_ not in NOUN_TAGS or sentence_cased(doc[start].text):
        return None
    # A place the parser hung on the frame is the scene's ("a photo of two men on a bench").
    places = {i for i in outside if doc[i].dep_ == "prep" and i > main[0].i and doc[i].head.i in (frame.i, link.i)}
    if any(not doc[i].is_punct for i in outside - places - {main[0].i}):
        return None
    root = main[0].i - start
    tokens = doc[start:]
    heads = [root if t.i in outside else t.head.i - start for t in tokens]
    deps = ["ROOT" if t.i == main[0].i else ("punct" if t.is_punct and t.i in outside else t.dep_) for t in tokens]
    scene = Doc(doc.vocab, words=[t.text for t in tokens], spaces=[bool(t.whitespace_) for t in tokens],
                tags=[t.tag_ for t in tokens], heads=heads, deps=deps)
    return FramedScene(doc.text[:doc[start].idx], scene)


def reframed(framed: FramedScene, rewrite: str) -> str | None:
    """The caption with its scene rewritten, or None where the rewrite no longer reads inside the frame: a new
    capital, or a verb or "there" that makes the noun phrase a sentence."""
    scene = framed.scene.text
    if rewrite[:1] != rewrite[:1].lower() and scene[:1] == scene[:1].lower():
        return None
    if _count(rewrite, SENTENCE_WORDS) > _count(scene, SENTENCE_WORDS):
        return None
    return framed.prefix + rewrite


def _count(text: str, words: frozenset) -> int:
    """How many of `words` the text has outside a relative clause's opening ("that is", "who are")."""
    tokens = [w.strip(".,!?;:").lower() for w in text.split()]
    return sum(w in words and not (k and tokens[k - 1] in RELATIVE_PRONOUNS) for k, w in enumerate(tokens))

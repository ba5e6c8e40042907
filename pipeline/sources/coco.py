"""COCO captions files (`captions_train2017.json`, `captions_val2017.json`): captions joined to their images.

The file is one JSON object with `images` (id, file_name, coco_url, ...) and `annotations` (id, image_id,
caption). The caption annotation id is the stable key: a caption's example_id, and so its seeds, do not
depend on where it sits in the file. Its dead letters carry the annotation id as source_index. Ids are unique or
rejected: a repeated caption id (duplicate_caption_id), or a caption of an image id listed twice
(duplicate_image_id), is a dead letter.
"""
from __future__ import annotations

import posixpath
from collections import Counter

import apache_beam as beam

from pipeline.io.dead_letters import REJECTED
from pipeline.perturb.outcomes import Reject
from pipeline.perturb.text import has_surrogates, printable
from pipeline.records import example_id
from pipeline.sources.files import (
    DEFAULT_BOUNDS,
    INT64,
    READ,
    InputBounds,
    PROBLEMS,
    InputChanged,
    InputFileError,
    problem_count,
    read_json,
    reject_letter,
    repeated_name,
    require_file,
)

SOURCE = "coco"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_captions_file(path: str, version: tuple = ()) -> tuple[list, list]:
    """(images, annotations) of a COCO captions file, or InputFileError naming what is wrong; InputChanged where
    it is not `version` (files.opened_as_planned)."""
    data = read_json(path, version, names_once=True)
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a COCO captions object, found a JSON {type(data).__name__}")
    if repeated_name(data) is not None:  # json keeps the last: a hand-merged file's first annotations were lost
        raise InputFileError(f"{path}: its object names {printable(repeated_name(data))[:80]!r} twice: which one "
                             f"holds the captions cannot be told; merge them into one")
    for field in ("images", "annotations"):
        if not isinstance(data.get(field), list):
            raise InputFileError(f"{path}: not a COCO captions file (no '{field}' list)")
    return data["images"], data["annotations"]


def caption_texts(path: str) -> list:
    """The caption of every annotation of the file, as given (for counts made before a run: progress totals)."""
    return [a.get("caption") if isinstance(a, dict) else None for a in load_captions_file(path)[1]]


def check_file(path: str) -> None:
    require_file(path)
    load_captions_file(path)


class ImageIndex(dict):
    """image id -> {file_name, image_url}, and `duplicates`: id -> entries, for the ids the file lists more than
    once. Those are kept out of the mapping: which entry a caption means cannot be told, so its captions are
    rejected (duplicate_image_id), never joined to whichever entry came last."""

    def __init__(self):
        super().__init__()
        self.duplicates: dict[int, int] = {}
        self.repeated: dict[int, str] = {}  # id -> the field its entry names twice (which one is meant: not told)
        self.malformed: dict[int, str] = {}  # id -> what is wrong with its entry (a file_name that is no string)


_JSON_KINDS = {"dict": "object", "list": "array", "str": "string"}


def _kind(value) -> str:
    return "missing" if value is None else f"a JSON {_JSON_KINDS.get(type(value).__name__, type(value).__name__)}"


def image_index(images: list) -> ImageIndex:
    """The images of a captions file by id; malformed image entries are left out (their captions are rejected)."""
    index, seen = ImageIndex(), Counter()
    for image in images:
        if not (isinstance(image, dict) and _is_int(image.get("id"))):
            continue
        seen[image["id"]] += 1
        if repeated_name(image) is not None:
            index.repeated[image["id"]] = repeated_name(image)
        elif not isinstance(image.get("file_name"), str):
            index.malformed[image["id"]] = f"its file_name is {_kind(image.get('file_name'))}, not a string"
        elif image.get("coco_url") is not None and not isinstance(image.get("coco_url"), str):
            index.malformed[image["id"]] = f"its coco_url is {_kind(image.get('coco_url'))}, not a string"
        else:
            index[image["id"]] = {"file_name": image["file_name"], "image_url": image.get("coco_url")}

    index.duplicates = {image_id: n for image_id, n in seen.items() if n > 1}
    for image_id in index.duplicates:
        index.pop(image_id, None)
    return index


def normalise(raw, source_file: str, images: ImageIndex, bounds: InputBounds = DEFAULT_BOUNDS) -> dict:
    if not isinstance(raw, dict):
        raise Reject("not_an_object", f"expected a JSON object, got a JSON {type(raw).__name__}")
    if repeated_name(raw) is not None:
        raise Reject("repeated_field", f"field {printable(repeated_name(raw))[:80]!r} appears twice; which one "
                                       f"holds it cannot be told")
    caption_id = raw.get("id")
    if not _is_int(caption_id):
        raise Reject("bad_id", f"caption annotation id must be an integer, got {caption_id!r:.40}")
    bounds.id(caption_id, "caption annotation id")
    image_id = raw.get("image_id")
    if not _is_int(image_id):
        raise Reject("bad_image_id", f"image_id must be an integer, got {image_id!r:.40}")
    bounds.id(image_id, "image_id")
    if image_id in images.duplicates:
        raise Reject("duplicate_image_id", f"image_id {image_id} is listed {images.duplicates[image_id]} times in "
                                           f"the file's images")
    if image_id in images.repeated:
        raise Reject("repeated_field", f"image {image_id}'s entry names {printable(images.repeated[image_id])[:80]!r} "
                                       f"twice; which one holds it cannot be told")
    if image_id in images.malformed:  # there, but not as an image can be: not "unknown"
        raise Reject("bad_image_entry", f"image {image_id}'s entry is malformed: {images.malformed[image_id]}")
    image = images.get(image_id)
    if image is None:
        raise Reject("unknown_image", f"image_id {image_id} is not in the file's images")
    for field, value in image.items():  # a JSON escape (\\ud800) or a byte that is not UTF-8 in the image's entry
        if value and (has_surrogates(value) or len(value) > bounds.max_caption_chars):
            bounds.text(value, field)
    caption = bounds.caption(raw.get("caption"), "caption").strip()
    return {
        "example_id": example_id(SOURCE, str(caption_id)),
        "source": SOURCE,
        "source_file": source_file,
        "source_index": caption_id,
        "caption_id": caption_id,
        "image_id": image_id,
        "key": str(caption_id),
        **image,
        "caption": caption,
    }


class _ParseCaptions(beam.DoFn):
    def __init__(self, stage: str, table: str, bounds: InputBounds):
        self.stage, self.table, self.bounds = stage, table, bounds

    def process(self, entry):
        path, source_file, version = entry
        try:
            images, annotations = load_captions_file(path, version)
        except InputChanged as e:
            yield beam.pvalue.TaggedOutput(PROBLEMS, problem_count(str(e)))
            yield beam.pvalue.TaggedOutput(READ, (source_file, 0))
            return
        except InputFileError as e:  # a file too large for the launcher to have checked: one dead letter for it
            yield beam.pvalue.TaggedOutput(READ, (source_file, 1))
            yield reject_letter(self.stage, self.table, SOURCE, source_file, -1, Reject("malformed_file", str(e)),
                                None, self.bounds)
            return
        index = image_index(images)
        del images
        yield beam.pvalue.TaggedOutput(READ, (source_file, len(annotations)))
        seen = set()
        for position, raw in enumerate(annotations):
            try:
                self.bounds.check_depth(raw)
                record = normalise(raw, source_file, index, self.bounds)
                if record["caption_id"] in seen:
                    raise Reject("duplicate_caption_id", f"caption id {record['caption_id']} appears again")
                seen.add(record["caption_id"])
                yield record
            except Reject as skip:
                key = raw.get("id") if isinstance(raw, dict) and _is_int(raw.get("id")) else position
                key = key if key in INT64 else position  # the dead letter's source_index is an int64 column
                yield reject_letter(self.stage, self.table, SOURCE, source_file, key, skip, raw, self.bounds)


class ReadCocoCaptions(beam.PTransform):
    """A COCO captions file -> {"records", "rejected", "read": (file, captions in file)}."""

    def __init__(self, path: str, stage: str, table: str, bounds: InputBounds = DEFAULT_BOUNDS,
                 source_file: str | None = None, version: tuple = ()):
        super().__init__()
        self.path, self.stage, self.table, self.bounds = path, stage, table, bounds
        self.source_file, self.version = source_file, version

    def expand(self, pbegin):
        source_file = self.source_file or posixpath.basename(self.path.replace("\\", "/"))
        outputs = (
            pbegin
            | "File" >> beam.Create([(self.path, source_file, self.version)])
            | "ParseCaptions" >> beam.ParDo(_ParseCaptions(self.stage, self.table, self.bounds))
            .with_outputs(REJECTED, READ, PROBLEMS, main="records")
        )
        records = outputs.records | "Spread" >> beam.Reshuffle()
        return {"records": records, REJECTED: outputs[REJECTED], READ: outputs[READ], PROBLEMS: outputs[PROBLEMS]}


def labelled(letter: dict, stage: str, table: str) -> dict:
    return {**letter, "stage": stage, "table": table}

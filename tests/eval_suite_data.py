"""Tiny datasets in each evaluation suite's own published layout, made of solid-colour images and captions:
SugarCrepe's JSON + COCO val2017 images, ARO's JSON files (+ BLIP's Karpathy test files for the order sets),
VL-CheckList's JSON files, and clip-benchmark's WebDataset folders (classification and retrieval)."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from PIL import Image

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 40), "blue": (30, 60, 220), "yellow": (240, 220, 30),
           "white": (250, 250, 250), "black": (10, 10, 10), "purple": (130, 40, 160)}
SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def image(path: Path, colour: str, size=(48, 40), fmt="JPEG") -> Path:
    """A solid-colour image with a white square in one corner (so a crop differs from the whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", size, COLOURS[colour])
    im.paste((255, 255, 255), (0, 0, size[0] // 4, size[1] // 4))
    im.save(path, fmt)
    return path


def _jpeg_bytes(colour: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 40), COLOURS[colour]).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def sugarcrepe(root: Path) -> tuple[Path, Path]:
    """(--sugarcrepe_root, --coco_val_images): 3 rows in each of the seven files."""
    ann, images = root / "sugarcrepe", root / "val2017"
    colours = list(COLOURS)
    for s, subset in enumerate(SUGARCREPE_SUBSETS):
        rows = {}
        for k in range(3):
            colour, other = colours[(s + k) % len(colours)], colours[(s + k + 3) % len(colours)]
            filename = f"{s * 10 + k:012d}.jpg"
            image(images / filename, colour)
            rows[str(100 + 2 * k)] = {"filename": filename, "caption": f"a {colour} square on a table",
                                      "negative_caption": f"a {other} square on a table"}
        write_json(ann / f"{subset}.json", rows)
    return ann, images


def aro(root: Path) -> tuple[Path, Path, Path]:
    """(--aro_root, --aro_coco_root, --aro_flickr_root)."""
    vg, coco, flickr = root / "aro", root / "aro_coco", root / "aro_flickr"
    relations, attributes = [], []
    for k, (colour, other) in enumerate([("red", "blue"), ("green", "yellow"), ("white", "black"), ("blue", "red")]):
        path = f"{2400000 + k}.jpg"
        image(vg / "images" / path, colour, size=(64, 48))
        box = {"bbox_x": 8, "bbox_y": 4, "bbox_w": 40, "bbox_h": 36}
        relations.append({"image_id": 2400000 + k, "image_path": path, **box,
                          "relation_name": ["on", "near", "on", "holding"][k],
                          "true_caption": f"the {colour} cup is on the table",
                          "false_caption": f"the table is on the {colour} cup"})
        attributes.append({"image_id": 2400000 + k, "image_path": path, **box, "attributes": [colour, other],
                           "true_caption": f"the {colour} cup and the {other} plate",
                           "false_caption": f"the {other} cup and the {colour} plate"})
    write_json(vg / "visual_genome_relation.json", relations)
    write_json(vg / "visual_genome_attribution.json", attributes)
    captions = ["A small red car parks beside a tall green tree near the old house.",
                "Two brown dogs run across a wide sandy beach under a blue sky."]
    coco_rows = []
    for k, colour in enumerate(["red", "yellow"]):
        name = f"val2014/COCO_val2014_{k + 1:012d}.jpg"
        image(coco / name, colour)
        coco_rows.append({"image": name, "caption": captions, "image_id": k + 1})
    write_json(coco / "coco_karpathy_test.json", coco_rows)
    name = "flickr30k-images/1000092795.jpg"
    image(flickr / name, "green")
    write_json(flickr / "flickr30k_test.json", [{"image": name, "caption": captions[::-1]}])
    return vg, coco, flickr


def vl_checklist(root: Path) -> Path:
    vl = root / "vl_checklist"
    files = {"Attribute/vg/color.json": [("red", "blue"), ("green", "purple")],
             "Object/vg/location.json": [("yellow", "black")],
             "Relation/vg/action.json": [("white", "red"), ("blue", "green")]}
    k = 0
    for relpath, pairs in files.items():
        records = []
        for colour, other in pairs:
            path = f"VG_100K/{2300000 + k}.jpg"
            image(vl / path, colour)
            records.append([path, {"POS": [f"a {colour} ball"], "NEG": [f"a {other} ball"]}])
            k += 1
        write_json(vl / relpath, records)
    return vl


def _tar(path: Path, samples: list[dict[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for k, sample in enumerate(samples):
            for ext, data in sample.items():
                info = tarfile.TarInfo(f"s{k:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def wds_classification(folder: Path, classes: list[str], labels: list[int], templates: list[str]) -> Path:
    """clip-benchmark's WebDataset classification folder: an image of class labels[k]'s colour per sample."""
    _tar(folder / "test" / "0.tar", [{"jpg": _jpeg_bytes(classes[y]), "cls": str(y).encode()} for y in labels])
    (folder / "test" / "nshards.txt").write_text("1\n")
    (folder / "classnames.txt").write_text("\n".join(classes) + "\n")
    (folder / "zeroshot_classification_templates.txt").write_text("\n".join(templates) + "\n")
    return folder


def wds_retrieval(folder: Path, items: list[tuple[str, list[str]]]) -> Path:
    """clip-benchmark's WebDataset retrieval folder: per sample an image and its captions, one per line."""
    _tar(folder / "test" / "0.tar", [{"jpg": _jpeg_bytes(colour), "txt": "\n".join(captions).encode()}
                                     for colour, captions in items])
    (folder / "test" / "nshards.txt").write_text("1\n")
    (folder / "dataset_type.txt").write_text("retrieval\n")
    return folder


IMAGENET_CLASSES = ["red", "green", "blue", "yellow", "white", "black"]
IMAGENET_LABELS = [0, 1, 2, 3, 4, 5, 0, 2]
TEMPLATES = ["a photo of a {c} thing.", "a {c} square."]
RETRIEVAL_ITEMS = [("red", ["a red square", "something red"]), ("blue", ["a blue square", "a blue wall"]),
                   ("green", ["a green field", "green paint"]), ("yellow", ["a yellow sun", "a yellow card"])]


def standard(root: Path) -> tuple[Path, Path, Path]:
    """(--imagenet_root, --vtab_root, --retrieval_root)."""
    imagenet = wds_classification(root / "wds_imagenet1k", IMAGENET_CLASSES, IMAGENET_LABELS, TEMPLATES)
    vtab = root / "vtab"
    wds_classification(vtab / "wds_vtab-cifar10", ["red", "blue", "green"], [0, 1, 2, 1], TEMPLATES)
    wds_classification(vtab / "wds_vtab-dtd", ["yellow", "black", "white", "purple", "red"], [4, 3, 2, 1, 0],
                       TEMPLATES)
    retrieval = root / "retrieval"
    wds_retrieval(retrieval / "wds_mscoco_captions", RETRIEVAL_ITEMS)
    wds_retrieval(retrieval / "wds_flickr30k", RETRIEVAL_ITEMS[::-1][:3])
    return imagenet, vtab, retrieval

"""A row's image for training and evaluation: from `--stage=images` output, from a corpus's own img2dataset shards,
or from a local folder of image files.

- images stage output (a folder with index/ and shards/): looked up by the row's example_id.
- img2dataset's output for a corpus (webdataset .tar shards, or parquet shards with the image bytes; the folder
  itself holds them): looked up by the row's key, the corpus's own (pipeline/publish/image_shards.py). A row
  without a key, or whose key no shard holds, has no image; nor has one whose key two samples hold, or whose
  sample's URL is not the row's (ImageOfAnotherRow).
- a local folder: Visual Genome rows by their image_path under it (VG_100K/2400041.jpg), COCO rows by their
  file_name (also under train2017/ or val2017/ when the folder is COCO's root).
SWAP rows carry ARO's box: `crop=True` gives the box region, as ARO evaluates.
A path that leads outside the local folder (absolute, "..") is refused unread (ImageOutsideRoot), as the images
stage refuses it. Either way an image is measured from its header before it is decoded
(pipeline/publish/images.py open_bounded): one past max_pixel_values is ImageTooLarge, a box that misses the
image BadBox.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.publish.image_shards import ImageNotTheRows, open_shard_folder
from pipeline.publish.images import (
    MAX_PIXEL_VALUES,
    crop_box,
    leads_outside,
    open_bounded,
    open_images,
    url_sha256,
)
from pipeline.urls import redacted

BBOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
COCO_SPLIT_FOLDERS = ("", "train2017", "val2017")


class ImageMissing(LookupError):
    pass


class ImageOutsideRoot(ImageMissing):
    """The row names a path outside the images folder (absolute, ".."): never opened. Links inside the folder are
    followed, as a user's own (COCO's train2017/ is often a link to shared storage)."""


class ImageOfAnotherRow(ImageMissing):
    """The corpus's shards hold an image under the row's key that is not the row's (image_shards.KeyedShards):
    never given to it."""


class ImageLookup:
    def __init__(self, root: str, max_pixel_values: int = MAX_PIXEL_VALUES):
        self.root, self.max_pixel_values = Path(root), max_pixel_values
        if not self.root.is_dir():
            raise ValueError(f"--images: no such folder {root}")
        self.shards = self.corpus = None
        if (self.root / "index").is_dir() and (self.root / "shards").is_dir():
            self.shards = open_images(str(self.root), max_pixel_values=max_pixel_values)
        else:
            try:
                self.corpus = open_shard_folder(root)
            except ValueError as e:
                raise ValueError(f"--images: {e}") from None

    def _path(self, row: dict) -> Path:
        image_path, file_name = (str(row[c]) if row.get(c) else "" for c in ("image_path", "file_name"))
        outside = next((name for name in (image_path, file_name) if name and leads_outside(name)), None)
        if outside:
            raise ImageOutsideRoot(f"{row.get('example_id')}: {outside!r} leads outside {self.root}; not opened")
        names = [image_path] if image_path else []
        if file_name:
            names += [str(Path(folder, file_name)) for folder in COCO_SPLIT_FOLDERS]
        for name in names:
            path = self.root / name
            if path.is_file():
                return path
        raise ImageMissing(f"no image for {row.get('example_id')} under {self.root} (tried {', '.join(names)})")

    def _corpus_image(self, row: dict) -> bytes:
        key = row.get("key")
        if key is None or not str(key).strip():
            raise ImageMissing(f"no image for {row.get('example_id')}: the row has no key to find it by in the "
                               f"{self.corpus.format} shards of {self.root}")
        # the row's own image reference, which its sample's must match where both are known (image_shards.py)
        reference = row.get("image_url") or row.get("file_name")
        try:
            data = self.corpus.get(str(key), str(reference) if reference else None)
        except ImageNotTheRows as e:
            raise ImageOfAnotherRow(f"no image for {row.get('example_id')}: {e}") from None
        if data is None:
            raise ImageMissing(f"no image for {row.get('example_id')}: key {key!r} is in none of the "
                               f"{self.corpus.format} shards of {self.root}")
        return data

    def __call__(self, row: dict, crop: bool = True):
        """The row's RGB PIL image (its ARO box region when the row has one and crop is set)."""
        if self.shards is not None:
            if row["example_id"] not in self.shards:
                raise ImageMissing(f"no image for {row['example_id']} in {self.root} (see its index/)")
            index_row = self.shards.index_row(row["example_id"])
            indexed, digest = index_row.get("url"), index_row.get("url_sha256")
            if row.get("image_url") and indexed and (url_sha256(row["image_url"]) != digest if digest else
                                                     redacted(indexed) != redacted(row["image_url"])):
                # tables remade from a corpus whose urls changed keep their example_ids: the image fetched is
                # another picture
                raise ImageMissing(f"the image of {row['example_id']} in {self.root} was fetched from "
                                   f"{redacted(indexed)}, not the row's {redacted(row['image_url'])}: run the images "
                                   f"stage again")
            found = self.shards[row["example_id"]]
            image = found.crop() if crop else found.image
            return image.convert("RGB")
        source = self._path(row) if self.corpus is None else self._corpus_image(row)
        with open_bounded(source, self.max_pixel_values) as image:
            image = image.convert("RGB")
        if crop and all(row.get(c) is not None for c in BBOX):
            x, y, w, h = (float(row[c]) for c in BBOX)
            image = crop_box(image, (x, y, x + w, y + h), self.max_pixel_values)
        return image

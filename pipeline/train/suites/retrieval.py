"""Zero-shot retrieval (Appendix E, Table 10: COCO and Flickr30k image and text Recall@1) through clip-benchmark's
zeroshot_retrieval.evaluate, on its published WebDataset layout (dataset_type.txt = retrieval; samples:
<key>.jpg|png|webp + <key>.txt with one caption per line, the Karpathy test split):
    --retrieval_root/wds_mscoco_captions/test/{nshards.txt,0.tar,...}, dataset_type.txt
    --retrieval_root/wds_flickr30k/test/...

Image retrieval: for each caption, whether its image is among the top K images; text retrieval: for each image,
whether one of its captions is among the top K captions (clip-benchmark's definition, as in the CLIP papers).
"""
from __future__ import annotations

from pathlib import Path

from pipeline.train.suites import Context, SuiteSkipped, bounded_images, root_flag
from pipeline.train.suites.zeroshot import import_clip_benchmark, is_wds_folder, wds_folder_name

DATASETS = {"coco_retrieval": "mscoco_captions", "flickr_retrieval": "flickr30k"}
RECALL_K = (1, 5, 10)
IMAGE_SUFFIXES = ("webp", "png", "jpg", "jpeg")


def folder(name: str, args) -> Path:
    root = root_flag(args, "retrieval_root")
    path = root / wds_folder_name(DATASETS[name])
    if not is_wds_folder(path):
        raise SuiteSkipped(f"--retrieval_root={root} has no {path.name}/test/nshards.txt")
    return path


def count(path: Path) -> tuple[int, int]:
    """(images, captions) in the folder's test shards as clip-benchmark's loader yields them: one image per sample
    that has one (its to_tuple takes the first of webp, png, jpg, jpeg) and the lines of that sample's .txt; read
    from the tar members, grouped into samples by webdataset's key (no image is decoded). Recall@K needs K <= the
    number of images, and a WebDataset has no length."""
    import tarfile

    from pipeline.train.suites import WDS_KEY

    shards = int((path / "test" / "nshards.txt").read_text().strip())
    images = captions = 0
    for k in range(shards):
        key, sample = None, {}
        with tarfile.open(path / "test" / f"{k}.tar") as tar:
            for member in tar:
                found = WDS_KEY.match(member.name) if member.isfile() else None
                if not found:
                    continue
                suffix = found[2].lower()
                if found[1] != key or suffix in sample:  # webdataset's group_by_keys starts a new sample
                    images, captions = _add_sample(sample, images, captions)
                    key, sample = found[1], {}
                sample[suffix] = tar.extractfile(member).read() if suffix == "txt" else b""
        images, captions = _add_sample(sample, images, captions)
    return images, captions


def _add_sample(sample: dict, images: int, captions: int) -> tuple[int, int]:
    if "txt" in sample and any(s in sample for s in IMAGE_SUFFIXES):
        return images + 1, captions + len(sample["txt"].decode("utf-8").splitlines())
    return images, captions


def check(name: str, args) -> None:
    folder(name, args)
    import_clip_benchmark()


def run(name: str, ctx: Context, args) -> dict:
    import warnings

    import torch

    builder, _, zeroshot_retrieval = import_clip_benchmark()
    path = folder(name, args)
    with warnings.catch_warnings():  # webdataset's "shardshuffle is None": the order is kept, as wanted
        warnings.simplefilter("ignore", UserWarning)
        ds = builder.build_dataset(f"wds/{DATASETS[name]}", root=str(path), transform=ctx.typed_transform(),
                                   split="test", download=False, task="zeroshot_retrieval")
    images, captions = count(path)
    if not images:
        raise ValueError(f"{path}: no image in test/")
    loader = torch.utils.data.DataLoader(ds, batch_size=ctx.batch_size, num_workers=0,
                                         collate_fn=builder.image_captions_collate_fn)
    with bounded_images(ctx.image_max_pixel_values):
        figures = zeroshot_retrieval.evaluate(ctx.clip, loader, ctx.tokenizer, ctx.device, amp=ctx.amp,
                                              recall_k_list=[k for k in RECALL_K if k <= images])
    return {**{k: float(v) for k, v in sorted(figures.items())}, "images": images, "captions": captions}

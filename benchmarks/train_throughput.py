"""Finetuning throughput: one epoch on generated rows and images, then images/s and peak GPU memory.

    python benchmarks/train_throughput.py                                  # ViT-B-32, 6,144 rows, batch 256
    python benchmarks/train_throughput.py --model=hardpos-tiny --rows=256 --batch_size=32   # a CPU dry run

Random init (no weights are downloaded), the trainer's default precision (mixed on a GPU, fp32 on CPU). The rows
are train-table rows with distinct captions, hard positives and hard negatives; the images are 256 x 256 noise
JPEGs, so decoding and the train transform cost what real COCO images cost. Prints the trainer's summary figures:
the rate over the whole run (its first steps included) and the steady rate after its first steps
(finetune.WARMUP_STEPS_UNTIMED), which is what a long run sustains.
"""
from __future__ import annotations

import argparse
import io
import json
import random
import tempfile
from pathlib import Path

from PIL import Image

from pipeline.tables.folders import write_run_folder
from pipeline.train import finetune

WORDS = "red blue green small large wooden metal dog cat man woman table chair car bus tree".split()


def make_data(root: Path, rows: int, image_size: int) -> tuple[Path, Path]:
    images = root / "images" / "train2017"
    images.mkdir(parents=True)
    table = []
    for i in range(rows):
        rng = random.Random(i)
        a, b, c, d = rng.sample(WORDS, 4)
        out = io.BytesIO()
        Image.frombytes("RGB", (image_size, image_size), rng.randbytes(image_size * image_size * 3)).save(out, "JPEG")
        (images / f"{i:012d}.jpg").write_bytes(out.getvalue())
        table.append({"example_id": f"bench{i:07d}", "caption_id": i, "image_id": i, "key": str(i),
                      "file_name": f"{i:012d}.jpg", "image_url": None, "source_file": "benchmark",
                      "caption": f"a {a} {b} next to a {c} {d}",
                      "hard_positive": f"a {a} {b} beside a {c} {d}", "positive_type": "replace",
                      "hard_negative": f"a {c} {b} next to a {a} {d}", "negative_type": "swap",
                      "positive_generator": None, "positive_model": "benchmark", "positive_prompt_sha256": "0" * 64,
                      "negative_generator": "benchmark", "seed": 0})
    write_run_folder(root / "data", "train", table)
    return root / "data", root / "images"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--rows", type=int, default=6144)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--image_size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--recipe", default="clip")
    parser.add_argument("--max_steps", type=int, default=None, help="Stop early (CPU smoke runs).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hardpos-train-bench-") as tmp:
        data, images = make_data(Path(tmp), args.rows, args.image_size)
        argv = [f"--data={data}", f"--images={images}", f"--out={Path(tmp) / 'out'}", f"--model={args.model}",
                "--pretrained=", "--epochs=1", f"--batch_size={args.batch_size}", f"--workers={args.workers}",
                f"--recipe={args.recipe}", "--save_every=0", "--log_every=5"]
        if args.max_steps:
            argv.append(f"--max_steps={args.max_steps}")
        finetune.main(argv)
        summary = json.loads((Path(tmp) / "out" / "summary.json").read_text())
    peak = summary["peak_gpu_memory_bytes"]
    print(json.dumps({k: summary[k] for k in ("device", "precision", "steps", "train_seconds", "images_per_second",
                                              "images_per_second_steady", "steady_after_steps",
                                              "peak_gpu_memory_bytes")}, indent=2))
    steady = summary["images_per_second_steady"]
    print(f"{args.model} on {summary['device']} ({summary['precision']}), batch {args.batch_size}: "
          f"{summary['images_per_second']} images/s over {summary['steps']} steps, "
          + (f"{steady} images/s after step {summary['steady_after_steps']}" if steady else
             f"no steady rate (run more than {summary['steady_after_steps']} steps)")
          + (f", peak GPU memory {peak / 2**30:.2f} GiB" if peak else ""))


if __name__ == "__main__":
    main()

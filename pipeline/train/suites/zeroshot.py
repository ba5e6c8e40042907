"""Zero-shot classification (Appendix E, Table 10: ImageNet-1K Acc@1/@5 and the VTAB tasks) through LAION's
clip-benchmark: its WebDataset reader (datasets/builder.py, `wds/...`), its classifier (class embedding = mean
of the normalised template embeddings, renormalised) and its logits; Acc@1, Acc@5 and mean per-class recall
with its definitions.

The data is clip-benchmark's published WebDataset layout (the `clip-benchmark/wds_*` dataset repos):
    <folder>/test/nshards.txt, <folder>/test/0.tar ... (samples: <key>.jpg|png|webp + <key>.cls)
    <folder>/classnames.txt, <folder>/zeroshot_classification_templates.txt
--imagenet_root is such a folder (wds_imagenet1k); --vtab_root holds one per task, named as clip-benchmark names
them (wds_vtab-cifar10, ..., wds_sun397). The VTAB figure is the mean Acc@1 over the tasks present.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.train.suites import Context, SuiteSkipped, bounded_images, root_flag

INSTALL_HINT = "pip install -e '.[eval]'"
# The 20 VTAB tasks of Table 10: clip-benchmark's "vtab" collection (19, with sun397) and vtab/cifar10.
VTAB_TASKS = ("vtab/caltech101", "vtab/cifar10", "vtab/cifar100", "vtab/clevr_count_all",
              "vtab/clevr_closest_object_distance", "vtab/diabetic_retinopathy", "vtab/dmlab",
              "vtab/dsprites_label_orientation", "vtab/dsprites_label_x_position", "vtab/dtd", "vtab/eurosat",
              "vtab/kitti_closest_vehicle_distance", "vtab/flowers", "vtab/pets", "vtab/pcam", "vtab/resisc45",
              "vtab/smallnorb_label_azimuth", "vtab/smallnorb_label_elevation", "sun397", "vtab/svhn")


def import_clip_benchmark():
    """clip-benchmark's builder and metrics (the eval extra), after open_clip (which brings torchvision in
    through pipeline/torchvision_compat.py, so that clip-benchmark's torchvision imports work on CPU)."""
    from pipeline.train.clip import TrainDependencyMissing, import_open_clip

    import_open_clip()
    try:
        from clip_benchmark.datasets import builder
        from clip_benchmark.metrics import zeroshot_classification, zeroshot_retrieval
    except ImportError as e:
        raise TrainDependencyMissing(f"this suite needs clip-benchmark ({INSTALL_HINT}): {e}") from None
    return builder, zeroshot_classification, zeroshot_retrieval


def wds_folder_name(dataset: str) -> str:
    """clip-benchmark's published folder for a dataset: wds_ + its name with / as - (wds_vtab-cifar10)."""
    return "wds_" + dataset.replace("/", "-")


MAX_SHARDS = 100_000  # clip-benchmark's largest published set has a few hundred
NSHARDS_BYTES = 64


def is_wds_folder(path: Path) -> bool:
    """A clip-benchmark WebDataset folder whose test/nshards.txt is a whole number of shards that are all there
    (0.tar ... N-1.tar): the library reads the number and builds a list that long, so a number no folder holds
    would cost memory by itself. UsageError (one line) for a file that says otherwise."""
    nshards = path / "test" / "nshards.txt"
    if not nshards.is_file():
        return False
    with open(nshards, "rb") as f:  # the walk made sure it is a regular file
        data = f.read(NSHARDS_BYTES + 1)
    text = data.decode("ascii", "replace")
    try:  # the number as clip-benchmark reads it: int() of the whole file
        count = int(text) if len(data) <= NSHARDS_BYTES else 0
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_SHARDS or any(not (path / "test" / f"{k}.tar").is_file() for k in range(count)):
        from pipeline.train.clip import UsageError

        raise UsageError(f"{nshards}: says {text[:20]!r} shards, but the folder does not hold test/0.tar to "
                         f"test/N-1.tar for that N")
    return True


def vtab_folders(root: Path) -> dict[str, Path]:
    return {t: root / wds_folder_name(t) for t in VTAB_TASKS if is_wds_folder(root / wds_folder_name(t))}


TEMPLATES = "zeroshot_classification_templates.txt"
MAX_TEMPLATES, MAX_TEMPLATE_CHARS = 1000, 1000  # ImageNet's are 80 lines of under 60 characters


def check_templates(folder: Path) -> None:
    """UsageError (one line) for templates clip-benchmark cannot use safely: more than MAX_TEMPLATES lines (each
    class's are encoded as one batch), a line past MAX_TEMPLATE_CHARS, or a brace other than {c}: it builds each
    prompt with template.format(c=classname), so any other brace is a format field of its own ({c:x>30000000} pads
    every class name to 30 MB, {c.__class__} reads attributes). Published templates hold only {c}."""
    path = folder / TEMPLATES
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(lines) > MAX_TEMPLATES:  # every class's templates are encoded in one batch
        from pipeline.train.clip import UsageError

        raise UsageError(f"{path}: {len(lines):,} lines, more than any published suite's ({MAX_TEMPLATES:,}); each "
                         f"class's templates are encoded as one batch")
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_TEMPLATE_CHARS:
            from pipeline.train.clip import UsageError

            raise UsageError(f"{path}: line {number} has {len(line):,} characters, more than a template's "
                             f"({MAX_TEMPLATE_CHARS:,})")
        if "{" in line.replace("{c}", "") or "}" in line.replace("{c}", ""):
            from pipeline.train.clip import UsageError

            raise UsageError(f"{path}: line {number} holds a brace other than {{c}} ({line[:80]!r}), which "
                             f"clip-benchmark would fill as a format field of its own")


def check(name: str, args) -> None:
    if name == "imagenet":
        root = root_flag(args, "imagenet_root")
        if not is_wds_folder(root):
            raise SuiteSkipped(f"--imagenet_root={root} is not a clip-benchmark WebDataset folder "
                               f"(no test/nshards.txt)")
        check_templates(root)
    elif name == "vtab":
        root = root_flag(args, "vtab_root")
        folders = vtab_folders(root)
        if not folders:
            raise SuiteSkipped(f"--vtab_root={root} has none of the task folders "
                               f"({wds_folder_name(VTAB_TASKS[0])}, ...)")
        for folder in folders.values():
            check_templates(folder)
    else:
        raise KeyError(name)
    import_clip_benchmark()


def topk_accuracy(logits, target, k: int) -> float:
    """Fraction of rows whose target is among the k largest logits (ties: torch.topk's order)."""
    top = logits.topk(k, dim=1).indices
    return float((top == target[:, None]).any(dim=1).float().mean())


def mean_per_class_recall(logits, target) -> float:
    """The mean over the classes present of the fraction of their rows predicted right (balanced accuracy)."""
    predicted = logits.argmax(dim=1)
    return float(sum(float((predicted[target == c] == c).float().mean()) for c in target.unique())
                 / len(target.unique()))


def classify(ctx: Context, folder: Path, dataset: str) -> dict:
    """Zero-shot figures for one WebDataset folder: acc1, acc5 (None under 5 classes), mean_per_class_recall,
    with the class and sample counts.

    clip-benchmark builds the classifier (zero_shot_classifier) and the logits (run_classification); its
    accuracy() is not used: it calls float() on a 1-element array, which NumPy 2.4 refuses (TypeError;
    deprecated since 1.25), so the figures are computed here from its logits, with its definitions
    (tests/test_eval_suites.py pins both)."""
    import warnings

    import torch

    builder, zeroshot_classification, _ = import_clip_benchmark()
    with warnings.catch_warnings():  # webdataset's "shardshuffle is None": the order is kept, as wanted
        warnings.simplefilter("ignore", UserWarning)
        ds = builder.build_dataset(f"wds/{dataset}", root=str(folder), transform=ctx.typed_transform(), split="test",
                                   download=False)
    if not ds.classes or not ds.templates:
        raise ValueError(f"{folder}: classnames.txt and zeroshot_classification_templates.txt are needed")
    loader = torch.utils.data.DataLoader(ds, batch_size=ctx.batch_size, num_workers=0)
    classifier = zeroshot_classification.zero_shot_classifier(ctx.clip, ctx.tokenizer, ds.classes, ds.templates,
                                                              ctx.device, amp=ctx.amp)
    with bounded_images(ctx.image_max_pixel_values):
        logits, target = zeroshot_classification.run_classification(ctx.clip, classifier, loader, ctx.device,
                                                                    amp=ctx.amp)
    if not len(target):
        raise ValueError(f"{folder}: no sample in test/")
    return {"acc1": topk_accuracy(logits, target, 1),
            "acc5": topk_accuracy(logits, target, 5) if len(ds.classes) >= 5 else None,
            "mean_per_class_recall": mean_per_class_recall(logits, target), "classes": len(ds.classes),
            "n": len(target)}


def run(name: str, ctx: Context, args) -> dict:
    if name == "imagenet":
        return classify(ctx, root_flag(args, "imagenet_root"), "imagenet1k")
    folders = vtab_folders(root_flag(args, "vtab_root"))
    tasks = {task: classify(ctx, folder, task) for task, folder in folders.items()}
    acc1 = [t["acc1"] for t in tasks.values()]
    return {"tasks": tasks, "mean_acc1": sum(acc1) / len(acc1), "tasks_present": len(tasks),
            "tasks_missing": [t for t in VTAB_TASKS if t not in tasks]}

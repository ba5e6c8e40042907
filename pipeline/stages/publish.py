"""--stage=publish: the tables under --output_dir as one Hub dataset repository, uploaded to --hub_repo.

    <publish_dir>/README.md                                   the dataset card (YAML configs + dataset_info)
    <publish_dir>/data/<config>/<split>-SSSSS-of-NNNNN.parquet
    <publish_dir>/.hardpos-publish.json                       the manifest: every file this publish wrote (with
                                                              sha256 and rows) and the publish report; not uploaded

Every check comes first, before anything is written or sent: each table's counts balance, its shards have the
row counts and sha256 its report recorded and the columns of schemas/<config>.json, no folder holds a run with
no report (unless --allow_partial), and the card's YAML parses. The folder is written only when it is empty or
holds an earlier publish's manifest, and only the files that manifest lists are ever replaced or deleted (hard
links to the run's shards, so nothing is copied twice). It is what the Hub serves:
`datasets.load_dataset(<publish_dir>, <config>)` resolves it exactly as it resolves the repo. Then, with
--hub_repo and without --dry_run, it is uploaded. --dry_run prints the plan and the card and sends nothing. Not a
Beam graph: the tables are already written; this arranges files.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from pipeline.io.commit import LOCK_FILE, FolderLock
from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.parquet import file_sha256
from pipeline.io.report import write_json
from pipeline.options import HardposOptions, UsageError, is_dry_run
from pipeline.publish.card import render
from pipeline.publish.layout import MANIFEST, PublishError, find_tables, is_published_folder, place, plan
from pipeline.publish.upload import check_repo_id, upload

STAGE = "publish"
PLACEHOLDER_REPO = "ORG/NAME"
OWN_FILES = (MANIFEST, MANIFEST.removesuffix(".json") + ".md", LOCK_FILE)  # never uploaded (see upload.py)


def tables(opts: HardposOptions) -> list[str]:
    return []


def publish_dir(opts: HardposOptions) -> Path:
    return Path(opts.publish_dir) if opts.publish_dir else Path(opts.output_dir) / "hub"


def earlier_publish(target: Path) -> set[str]:
    """The files (relative paths) an earlier publish wrote into target: the only ones this one may replace or
    delete. PublishError unless target is empty, missing, or holds nothing but an earlier publish."""
    if not target.exists():
        return set()
    if not target.is_dir():
        raise PublishError(f"--publish_dir {target} is a file, not a folder")
    present = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()} - set(OWN_FILES)
    if (target / MANIFEST).is_file():
        try:
            listed = set(json.loads((target / MANIFEST).read_text(encoding="utf-8"))["files"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PublishError(f"{target / MANIFEST}: unreadable manifest ({e}); move the folder away") from None
    elif is_published_folder(target):  # published before manifests: its card and data files
        listed = {f for f in present if f == "README.md" or (f.startswith("data/") and f.endswith(".parquet"))}
    else:
        listed = set()
    foreign = sorted(present - listed)
    if foreign:
        what = f"which its {MANIFEST} does not list" if listed else f"and no {MANIFEST} from an earlier publish"
        raise PublishError(f"--publish_dir {target} holds {foreign[0]}, {what}: publish writes only into an empty "
                           f"folder or one it published; move that away or choose another --publish_dir")
    return listed


def check_inputs(opts: HardposOptions) -> None:
    for flag, value in (("--output_dir", opts.output_dir), ("--publish_dir", opts.publish_dir)):
        if value and "://" in value:
            raise UsageError(f"{flag}: publish works on a local folder (copy a gs:// run down first), got {value}")
    if opts.hub_repo:
        try:
            check_repo_id(opts.hub_repo)
        except ValueError as e:
            raise UsageError(str(e)) from None
    try:
        find_tables(opts.output_dir, verify=False, allow_partial=opts.allow_partial, exclude=(publish_dir(opts),))
        earlier_publish(publish_dir(opts))
    except PublishError as e:
        raise UsageError(str(e)) from None


def _human(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _check_card(card: str, found) -> None:
    """The card's YAML parses and names every table: what the Hub validates, checked here before any upload."""
    try:
        meta = yaml.safe_load(card.split("---\n")[1])
        configs = {c["config_name"] for c in meta["configs"]}
    except (yaml.YAMLError, IndexError, KeyError, TypeError) as e:
        raise PublishError(f"the dataset card's YAML does not parse ({str(e).splitlines()[0]})") from None
    if configs != {t.config for t in found}:
        raise PublishError(f"the dataset card's configs {sorted(configs)} are not the tables found")


def _write_folder(target: Path, files: list, card: str, earlier: set[str], manifest: dict) -> None:
    """Replaces the earlier publish's files with these. The manifest lists the union while files change, so an
    interrupted publish leaves nothing that a later one would not own."""
    new = {dest for _, dest, _ in files} | {"README.md"}
    write_json(str(target / MANIFEST), {**manifest, "files": {f: {} for f in sorted(earlier | new)}})
    for stale in sorted(earlier - new):
        path = target / stale
        if path.exists():
            path.unlink()
        for parent in path.parents:  # folders this left empty
            if parent == target or any(parent.iterdir()):
                break
            parent.rmdir()
    for src, dest, _ in files:
        place(src, target / dest)
    (target / "README.md").write_text(card, encoding="utf-8")


def run_stage(options, opts: HardposOptions) -> dict:
    try:
        return _publish(options, opts)
    except PublishError as e:
        raise UsageError(str(e)) from None


def _publish(options, opts: HardposOptions) -> dict:
    dry_run = is_dry_run(options)
    repo_id = opts.hub_repo or PLACEHOLDER_REPO
    target = publish_dir(opts)
    skipped: list[str] = []
    # Every check before anything is written or sent: balance, row counts, sha256, schemas, unfinished runs.
    found = find_tables(opts.output_dir, allow_partial=opts.allow_partial, exclude=(target,), skipped=skipped)
    for line in skipped:
        print(f"skipped (--allow_partial): {line}")
    card = render(found, repo_id)
    _check_card(card, found)
    files = plan(found)
    earlier = earlier_publish(target)
    checksums = {dest: t.section["sha256"][src.relative_to(t.run_dir).as_posix()]
                 for t in found for src, dest in zip(t.files, t.hub_paths(), strict=True)}

    report = {
        "stage": STAGE,
        "output_dir": opts.output_dir,
        "publish_dir": str(target),
        "hub_repo": opts.hub_repo,
        "dry_run": dry_run,
        "uploaded": None,
        "skipped": skipped,
        "tables": {t.config: {
            "read": t.section.get("rows", 0),  # rows the run's report says it wrote
            "rows": t.rows,                    # rows in the published shards
            DISCARDED: 0, REJECTED: 0,
            "balanced": t.section.get("rows", 0) == t.rows,
            "discard_reasons": {}, "reject_reasons": {},
            "files": len(t.files), "split": t.split, "source": str(t.run_dir),
        } for t in found},
    }
    manifest_path = str(target / MANIFEST)
    with FolderLock(str(target), STAGE, "--publish_dir"):
        _write_folder(target, files, card, earlier, report)
        report["files"] = {dest: {"sha256": checksums[dest], "rows": rows, "source": str(src)}
                           for src, dest, rows in files}
        report["files"]["README.md"] = {"sha256": file_sha256(str(target / "README.md"))}
        write_json(manifest_path, report)

        print(f"publish plan: {len(files)} files, {len(found)} configs -> {target}"
              + (f" -> https://huggingface.co/datasets/{opts.hub_repo}" if opts.hub_repo else ""))
        for src, dest, rows in files:
            print(f"  {dest:<60} {rows:>10,} rows {_human(src.stat().st_size):>9}  <- {src}")
        print(f"  {'README.md':<60} (dataset card, {len(card.encode()):,} bytes)")
        if dry_run:
            print("\n--- README.md ---\n" + card + "--- end of README.md (dry run: nothing uploaded) ---\n")
        if opts.hub_repo and not dry_run:
            report["uploaded"] = upload(target, opts.hub_repo, opts.private)
            print(f"uploaded: {report['uploaded']}")
            write_json(manifest_path, report)
        elif not opts.hub_repo:
            print("no --hub_repo: folder built, nothing uploaded")
    report["report_path"] = manifest_path
    return report

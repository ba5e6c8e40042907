"""--stage=publish: the tables under --output_dir as one Hub dataset repository, uploaded to --hub_repo.

    <publish_dir>/README.md                                   the dataset card (YAML configs + dataset_info)
    <publish_dir>/data/<config>/<split>-SSSSS-of-NNNNN.parquet

The folder is rebuilt on every run (hard links to the run's shards, so nothing is copied twice) and is what
the Hub serves: `datasets.load_dataset(<publish_dir>, <config>)` resolves it exactly as it resolves the repo.
Then, with --hub_repo and without --dry_run, it is uploaded. --dry_run prints the plan and the card and
sends nothing. Not a Beam graph: the tables are already written; this arranges files.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.io.report import write_json
from pipeline.options import HardposOptions, UsageError, is_dry_run
from pipeline.publish.card import render
from pipeline.publish.layout import PublishError, find_tables, place, plan
from pipeline.publish.upload import check_repo_id, upload

STAGE = "publish"
REPORT_FILE = "publish_report.json"
PLACEHOLDER_REPO = "ORG/NAME"


def tables(opts: HardposOptions) -> list[str]:
    return []


def publish_dir(opts: HardposOptions) -> Path:
    return Path(opts.publish_dir) if opts.publish_dir else Path(opts.output_dir) / "hub"


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
        find_tables(opts.output_dir)
    except PublishError as e:
        raise UsageError(str(e)) from None


def _human(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def run_stage(options, opts: HardposOptions) -> dict:
    dry_run = is_dry_run(options)
    repo_id = opts.hub_repo or PLACEHOLDER_REPO
    found = find_tables(opts.output_dir)
    target = publish_dir(opts)
    for stale in (target / "data", target / "README.md"):  # a smaller release must not keep old shards
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    files = plan(found)
    for src, dest, _ in files:
        place(src, target / dest)
    card = render(found, repo_id)
    (target / "README.md").write_text(card, encoding="utf-8")

    print(f"publish plan: {len(files)} files, {len(found)} configs -> {target}"
          + (f" -> https://huggingface.co/datasets/{opts.hub_repo}" if opts.hub_repo else ""))
    for src, dest, rows in files:
        print(f"  {dest:<60} {rows:>10,} rows {_human(src.stat().st_size):>9}  <- {src}")
    print(f"  {'README.md':<60} (dataset card, {len(card.encode()):,} bytes)")
    if dry_run:
        print("\n--- README.md ---\n" + card + "--- end of README.md (dry run: nothing uploaded) ---\n")
    url = None
    if opts.hub_repo and not dry_run:
        url = upload(target, opts.hub_repo, opts.private)
        print(f"uploaded: {url}")
    elif not opts.hub_repo:
        print("no --hub_repo: folder built, nothing uploaded")

    report = {
        "stage": STAGE,
        "output_dir": opts.output_dir,
        "publish_dir": str(target),
        "hub_repo": opts.hub_repo,
        "dry_run": dry_run,
        "uploaded": url,
        "files": [{"path": dest, "source": str(src), "rows": rows} for src, dest, rows in files],
        "tables": {t.config: {
            "read": t.section.get("rows", 0),  # rows the run's report says it wrote
            "rows": t.rows,                    # rows in the published shards
            DISCARDED: 0, REJECTED: 0,
            "balanced": t.section.get("rows", 0) == t.rows,
            "discard_reasons": {}, "reject_reasons": {},
            "files": len(t.files), "split": t.split, "source": str(t.run_dir),
        } for t in found},
    }
    report_path = str(target.parent / REPORT_FILE) if opts.publish_dir else str(Path(opts.output_dir) / REPORT_FILE)
    write_json(report_path, report)
    report["report_path"] = report_path
    return report

"""--stage=publish: the tables under --output_dir as one Hub dataset repository, uploaded to --hub_repo.

    <publish_dir>/README.md                                   the dataset card (YAML configs + dataset_info)
    <publish_dir>/data/<config>/<split>-SSSSS-of-NNNNN.parquet
    <publish_dir>/.hardpos-publish.json                       the manifest: every file this publish wrote (with
                                                              sha256 and rows) and the publish report; not uploaded

Every check comes first, before anything is written or sent: each table's counts balance, its shards have the
row counts and sha256 its report recorded and the columns of schemas/<config>.json, no folder holds a run with
no report (unless --allow_partial), the card's YAML parses, and with --hub_repo the Hub login works. Each run
folder read is held under its lock (pipeline/io/commit.py) from those checks until the release is in place: a
stage into one of them is refused meanwhile. The folder is written only when it is empty or holds nothing but what
an earlier publish's valid manifest lists (no other file, folder or symbolic link). The new release is built
complete beside the old one (.hardpos-next: copies of the run's shards, each the bytes its report's sha256 names,
read through no link), then switched in by renames, which need no disk space: a full
disk leaves the earlier release as it was, and a switch cut off is finished by the next publish. It is what the
Hub serves: `datasets.load_dataset(<publish_dir>, <config>)` resolves it exactly as it resolves the repo. Then,
with --hub_repo and without --dry_run, it is uploaded. --dry_run prints the plan and the card and sends nothing.
Not a Beam graph: the tables are already written; this arranges files.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import yaml

from pipeline.io.commit import FolderLock, below_output, folder_path_problem, link_below_output
from pipeline.io.dead_letters import DISCARDED, REJECTED
from pipeline.options import HardposOptions, UsageError, is_dry_run
from pipeline.provenance import build_info
from pipeline.publish.card import render
from pipeline.publish.layout import (
    MANIFEST,
    NEXT,
    OWN_PREFIX,
    REPORT_FILE,
    PublishError,
    find_reports,
    file_identity,
    find_tables,
    open_folder_below,
    place,
    plan,
    read_manifest,
    write_new,
)
from pipeline.publish.upload import UploadError, check_repo_id, hub_login, upload
from pipeline.tables.folders import link_target, published_folder_holding, run_table_folder, staging_folder_holding
from pipeline.urls import has_scheme

STAGE = "publish"
PLACEHOLDER_REPO = "ORG/NAME"
PREV = OWN_PREFIX + "-prev"  # the earlier data/ during a switch, deleted after it


def tables(opts: HardposOptions) -> list[str]:
    return []


def publish_dir(opts: HardposOptions) -> Path:
    return Path(opts.publish_dir) if opts.publish_dir else Path(opts.output_dir) / "hub"


def _entries(target: Path, skip_own: bool = True) -> list[tuple[str, os.DirEntry]]:
    """Every entry under target (relative path, entry), links not followed, but publish's own at the top (unless
    skip_own is False)."""
    found, folders = [], [target]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if skip_own and folder == target and entry.name.startswith(OWN_PREFIX):
                    continue
                found.append((Path(entry.path).relative_to(target).as_posix(), entry))
                if entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))
    return sorted(found, key=lambda item: item[0])


def check_not_link(target: Path) -> None:
    """The publish folder itself is no symbolic link: publish would write the whole release through it, to a
    folder anywhere (PublishError, one line, before anything is written)."""
    if os.path.islink(target):
        raise PublishError(f"--publish_dir {target} is a symbolic link (to {link_target(target)}), which publish never "
                           f"follows or writes through; remove the link or choose another --publish_dir")


def check_publish_path(target: Path, output_dir: Path) -> None:
    """--publish_dir is reached the way it reads (commit.folder_path_problem: a `..` that climbs no link, no link below
    the output folder however it is named) and is no link itself (check_not_link). PublishError (one line) before
    anything is written."""
    check_not_link(target)
    parts = Path(target).parts
    missing = next((Path(*parts[:i]) for i, part in enumerate(parts) if part == ".." and not Path(*parts[:i]).is_dir()),
                   None)
    if missing is not None:  # `<out>/nothere/../hub`: every later write by this name would fail
        raise PublishError(f"--publish_dir {target}: its '..' follows {missing}, which is no folder; name the folder "
                           f"without '..'")
    real, out = Path(os.path.realpath(target)), Path(os.path.realpath(output_dir))
    if out == real or out.is_relative_to(real):
        raise PublishError(f"--publish_dir {target} is {'the output folder' if out == real else 'above it'}, which "
                           f"holds the runs it publishes; publish into a folder of its own (default <output_dir>/hub)")
    problem = folder_path_problem("--publish_dir", target, output_dir)
    if problem:
        raise PublishError(problem)
    if any(part.startswith(OWN_PREFIX) for part in Path(os.path.abspath(target)).parts):
        raise PublishError(f"--publish_dir {target}: {OWN_PREFIX}* folders are publish's own (a release being built, "
                           f"the one before it); publish into a folder of its own")
    staging = staging_folder_holding(target)
    if staging is not None:  # a run's staging folder (its mark): committed, or removed once its run is gone
        raise PublishError(f"--publish_dir {target} is inside {staging}, a run's staging folder, which the run or "
                           f"the next one removes; publish into a folder of its own")
    release = published_folder_holding(Path(os.path.abspath(target)).parent)
    if release is not None:  # a release inside a release: the outer one's check, switch and upload would take it
        raise PublishError(f"--publish_dir {target} is inside {release}, another published folder; publish into a "
                           f"folder of its own")
    table = run_table_folder(target)
    if table is not None:
        where = "is" if table == Path(os.path.abspath(target)) else f"is inside {table},"
        raise PublishError(f"--publish_dir {target} {where} a folder that the stages of the run in {table.parent} "
                           f"write (a table folder, dead letters or the LLM cache): the next stage replaces or writes "
                           f"into it; publish into a folder of its own")


def open_publish_folder(target: Path, output_dir: Path) -> int:
    """A descriptor of the publish folder, made where missing, opened once: below the output folder one name at a
    time with no link followed (mkdir, then O_NOFOLLOW), so that a link planted there after check_publish_path is
    refused, never written through; elsewhere the folder itself, no link. publish then works in the folder that
    descriptor names (/proc/self/fd/N), whatever is renamed or linked above it meanwhile."""
    check_publish_path(target, output_dir)
    below = below_output(target, output_dir)
    if below is None:
        os.makedirs(target, exist_ok=True)
        try:
            return os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            check_not_link(target)
            raise
    return open_folder_below(Path(below[0]), os.path.join(*below[1]) if below[1] else ".",
                             lambda path: link_below_output("--publish_dir", target, path))


def pinned(fd: int, target: Path) -> Path:
    """The path that names the folder behind fd itself (Linux: /proc/self/fd/N), else target's real path."""
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.is_dir() else Path(os.path.realpath(target))


def earlier_publish(target: Path, opened: bool = False) -> set[str]:
    """The files (relative paths) an earlier publish wrote into target: the only ones this one may replace or
    delete. PublishError unless target is missing, or holds nothing but the files its valid manifest lists (and
    the folders they are in): no other file or folder, no symbolic link (publish follows none it did not make)."""
    if not opened:  # a folder publish opened itself (open_publish_folder) is named through its descriptor
        check_not_link(target)
    if not target.exists():
        return set()
    if not target.is_dir():
        raise PublishError(f"--publish_dir {target} is a file, not a folder")
    listed = set(read_manifest(target)) if (target / MANIFEST).is_file() else set()
    if _switch_pending(target):  # a switch that was cut off: some of its files are in place already
        listed |= set(read_manifest(target / NEXT))
    folders = {parent.as_posix() for f in listed for parent in Path(f).parents if parent != Path(".")}
    foreign = [(entry.is_dir(follow_symlinks=False), relative, entry) for relative, entry in _entries(target)
               if entry.is_symlink() or not ((entry.is_dir() and relative in folders) or
                                             (entry.is_file() and relative in listed))]
    if foreign:
        _, relative, entry = min(foreign, key=lambda item: item[:2])  # a file before the folders it is in
        if entry.is_symlink():
            problem = "a symbolic link, which publish never follows or replaces"
        elif listed:
            problem = f"which its {MANIFEST} does not list"
        else:
            problem = f"and no {MANIFEST} from an earlier publish"
        raise PublishError(f"--publish_dir {target} holds {relative}, {problem}: publish writes only into an empty "
                           f"folder or one it published; move that away or choose another --publish_dir")
    return listed


def check_inputs(opts: HardposOptions) -> None:
    for flag, value in (("--output_dir", opts.output_dir), ("--publish_dir", opts.publish_dir)):
        if value and has_scheme(value):
            raise UsageError(f"{flag}: publish works on a local folder (copy a gs:// run down first), got {value}")
    if opts.hub_repo:
        try:
            check_repo_id(opts.hub_repo)
        except ValueError as e:
            raise UsageError(str(e)) from None
    try:
        check_publish_path(publish_dir(opts), Path(opts.output_dir))
        find_tables(opts.output_dir, verify=False, allow_partial=opts.allow_partial, exclude=(publish_dir(opts),),
                    leave_out_empty=opts.leave_out_empty)
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


def _why(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    return f"cannot write {e.filename} ({e.strerror})" if e.filename else f"cannot write ({e})"


def _switch_pending(target: Path) -> bool:
    """NEXT holds a complete release (its manifest is written last); a link there is not publish's."""
    return not (target / NEXT).is_symlink() and (target / NEXT / MANIFEST).is_file()


def _remove_own(path: Path) -> None:
    """Removes one of publish's own entries; a link there is removed, never followed."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


LEFTOVER_MARK = ".hardpos-publish-own"  # in NEXT and PREV as publish makes them: what a later publish may remove


def _make_own(path: Path, mode: int = 0o755) -> None:
    path.mkdir(mode=mode)
    with write_new(path, LEFTOVER_MARK):
        pass


def _remove_leftover(path: Path) -> None:
    """Removes NEXT or PREV left by a publish that was cut off: a link (never followed), an empty folder, or a folder
    holding publish's mark. Anything else at the name is a user's (a never-published folder's `.hardpos-prev/` of
    notes): PublishError, and it stays."""
    if path.is_symlink():
        path.unlink()
    elif path.is_dir() and (not any(path.iterdir()) or (path / LEFTOVER_MARK).is_file()):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        raise PublishError(f"{path}: publish keeps this name for its own folder, but this one is not publish's (it "
                           f"holds no {LEFTOVER_MARK}); move it away and publish again")


def _write_json(path: Path, obj: dict) -> None:
    """Written beside, then renamed over path: a full disk leaves the earlier file whole."""
    tmp = path.with_name(path.name + ".tmp")
    if os.path.lexists(tmp):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write((json.dumps(obj, indent=2) + "\n").encode("utf-8"))
    os.replace(tmp, path)


def _build_aside(target: Path, files: list, card: str, manifest: dict, root: Path,
                 recorded_in: dict) -> dict[str, tuple[int, int]]:
    """The whole new release in target/NEXT, its manifest last; the folder itself is not touched. Each shard is the
    bytes checked against the sha256 the manifest records, read from under root (the output folder) through no link.
    On any write error (a full disk) NEXT is removed and the earlier release stays as it was. Returns the (device,
    inode) of every file written, by its path in the release."""
    aside = target / NEXT
    written = {}
    try:
        for leftover in (aside, target / PREV):  # of a publish that was cut off
            _remove_leftover(leftover)
        _make_own(target / PREV)  # made now, so that the switch only renames
        _make_own(aside, mode=0o700)  # no other user plants in it; a racer as this user: _check_switched
        for src, dest, _ in files:
            written[dest] = place(src, dest, aside, root, manifest["files"][dest]["sha256"], recorded_in[dest])
        for name, data in (("README.md", card.encode("utf-8")),
                           (MANIFEST + ".tmp", (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))):
            with write_new(aside, name) as f:  # the manifest renamed last: a NEXT with a manifest is complete
                f.write(data)
            written[name.removesuffix(".tmp")] = data  # renamed into place (a rename may change its ctime): by bytes
        os.replace(aside / (MANIFEST + ".tmp"), aside / MANIFEST)
    except (OSError, PublishError) as e:
        for leftover in (aside, target / PREV):
            with contextlib.suppress(PublishError):  # a user's folder at the name, found above, stays
                _remove_leftover(leftover)
        if isinstance(e, PublishError):
            raise
        raise PublishError(f"{target}: {_why(e)} while building the new release beside the earlier one; the folder "
                           f"is left as it was, nothing was uploaded") from None
    return written


def finish_switch(target: Path, manifest: dict | None = None, written: dict | None = None) -> None:
    """Switches a release built complete in target/NEXT into place: data/ swapped by two renames, then the card,
    then the manifest. Only renames, so a full disk cannot stop it half way; each step is skipped once done, so a
    switch cut off (killed) is finished by the next publish. Without a complete NEXT, leftovers are removed."""
    aside, old = target / NEXT, target / PREV
    planted = next((p for p in (aside / "data", aside / "README.md", target / "data", target / "README.md", old)
                    if p.is_symlink()), None)
    if planted is not None:  # publish makes none: a link renamed into place would serve files from anywhere
        raise PublishError(f"{planted}: a symbolic link, which publish never makes nor switches in; remove it and "
                           f"publish again")
    try:
        if _switch_pending(target):
            if (aside / "data").is_dir():
                if os.path.lexists(target / "data"):
                    if old.is_symlink():
                        old.unlink()
                    if not old.is_dir():
                        _make_own(old)
                    os.rename(target / "data", old / "data")
                os.rename(aside / "data", target / "data")
            if (aside / "README.md").is_file():
                os.replace(aside / "README.md", target / "README.md")
            os.replace(aside / MANIFEST, target / MANIFEST)  # the switch is done
        for leftover in (old, aside):
            _remove_leftover(leftover)
    except OSError as e:
        raise PublishError(f"{target}: switching to the new release stopped ({_why(e)}); run publish again to "
                           f"finish it") from None
    _check_switched(target, manifest, written)


def _check_switched(target: Path, manifest: dict | None, written: dict | None) -> None:
    """After the renames: what was switched in is what publish wrote. Whatever a racer in the publish folder put in
    NEXT between the check above and a rename is renamed along, so each entry switched in is looked at again, links
    not followed: a link, a hard link (its other name would change the release), or a file or folder other than
    the ones written (`written`: their device and inode) is removed, never followed or uploaded, and the publish
    stops (PublishError). The manifest, when it was one of them, is written again from `manifest`, so that the next
    publish knows its files."""
    switched = [target / MANIFEST, target / "README.md", target / "data"]
    if (target / "data").is_dir() and not (target / "data").is_symlink():
        switched += [Path(entry.path) for _, entry in _entries(target / "data", skip_own=False)]
    planted = []
    for path in switched:
        try:
            found = path.lstat()
        except FileNotFoundError:
            continue
        relative = path.relative_to(target).as_posix()
        if stat.S_ISDIR(found.st_mode):
            made = written is None or relative == "data" or any(f.startswith(relative + "/") for f in written)
            if not made:  # a folder publish did not make
                planted.append(path)
            continue
        # publish makes no link and no hard link; a file other than the one it wrote was put in its place
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or (
                written is not None and not _is_written(path, found, written.get(relative))):
            planted.append(path)
    for path in planted:
        _remove_own(path)
    if target / MANIFEST in planted and manifest is not None:
        _write_json(target / MANIFEST, manifest)
    if planted:
        raise PublishError(f"{planted[0]}: not the file publish wrote (a link, a hard link or another file, put in "
                           f"{NEXT} while publish ran); it was removed, nothing was uploaded; publish again")


def _is_written(path: Path, found: os.stat_result, wrote) -> bool:
    """Whether the regular file at path (lstat: found) is the one publish wrote: its bytes (`wrote`, for the card and
    the manifest, small and renamed into place), else its identity (layout.file_identity)."""
    if isinstance(wrote, bytes):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as f:
            return f.read(len(wrote) + 1) == wrote
    return wrote == file_identity(found)


def _into(where: Path, opts: HardposOptions, dry_run: bool, api, files: list, card: str, report: dict,
          found: list) -> None:
    """The release built and switched in at `where` (the publish folder, opened once), and uploaded."""
    target = publish_dir(opts)
    with FolderLock(str(where), STAGE, "--publish_dir"):
        earlier_publish(where, opened=True)  # again, now that no other publish can change it
        finish_switch(where)    # one that a killed publish left
        written = _build_aside(where, files, card, report, Path(opts.output_dir),
                               {dest: t.run_dir / REPORT_FILE for t in found for dest in t.hub_paths()})
        finish_switch(where, report, written)
        print(f"publish plan: {len(files)} files, {len(found)} configs -> {target}"
              + (f" -> https://huggingface.co/datasets/{opts.hub_repo}" if opts.hub_repo else ""))
        for src, dest, rows in files:
            print(f"  {dest:<60} {rows:>10,} rows {_human(src.stat().st_size):>9}  <- {src}")
        print(f"  {'README.md':<60} (dataset card, {len(card.encode()):,} bytes)")
        if dry_run:
            print("\n--- README.md ---\n" + card + "--- end of README.md (dry run: nothing uploaded) ---\n")
        if opts.hub_repo and not dry_run:
            report["uploaded"] = upload(where, opts.hub_repo, opts.private, api=api)
            print(f"uploaded: {report['uploaded']}")
            try:
                _write_json(where / MANIFEST, report)
            except OSError as e:
                raise PublishError(f"{where / MANIFEST}: {_why(e)} while recording the upload, which is done; the "
                                   f"folder is complete") from None
        elif not opts.hub_repo:
            print("no --hub_repo: folder built, nothing uploaded")


def run_stage(options, opts: HardposOptions) -> dict:
    try:
        return _publish(options, opts)
    except (PublishError, UploadError) as e:
        raise UsageError(str(e)) from None


def _publish(options, opts: HardposOptions) -> dict:
    dry_run = is_dry_run(options)
    repo_id = opts.hub_repo or PLACEHOLDER_REPO
    target = publish_dir(opts)
    # The Hub login first: no token or no network is one line (exit 2) before any table is read or written.
    api = hub_login() if opts.hub_repo and not dry_run else None
    with contextlib.ExitStack() as locks:
        # Each run folder read is held under its lock until the new release is in place: a stage committing there
        # meanwhile would swap in shards other than the ones checked, which the links below would then name.
        for folder in run_folders(Path(opts.output_dir), target):
            locks.enter_context(FolderLock(str(folder), STAGE))
        return _publish_locked(opts, dry_run, repo_id, target, api)


def run_folders(output_dir: Path, target: Path) -> list[Path]:
    """The folders under output_dir whose report.json publish reads (not the publish folder's)."""
    return [report.parent for report in find_reports(output_dir) if report.parent.resolve() != target.resolve()]


def _publish_locked(opts: HardposOptions, dry_run: bool, repo_id: str, target: Path, api) -> dict:
    skipped: list[str] = []
    # Every check before anything is written or sent: balance, row counts, sha256, schemas, unfinished runs, empty
    # tables.
    found = find_tables(opts.output_dir, allow_partial=opts.allow_partial, exclude=(target,), skipped=skipped,
                        leave_out_empty=opts.leave_out_empty)
    for line in skipped:
        print(f"skipped {line}")
    card = render(found, repo_id)
    _check_card(card, found)
    files = plan(found)
    checksums = {dest: t.section["sha256"][src.relative_to(t.run_dir).as_posix()]
                 for t in found for src, dest in zip(t.files, t.hub_paths(), strict=True)}

    report = {
        "stage": STAGE,
        "hardpos": build_info(),
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
    report["files"] = {dest: {"sha256": checksums[dest], "rows": rows, "source": str(src)} for src, dest, rows in files}
    report["files"]["README.md"] = {"sha256": hashlib.sha256(card.encode("utf-8")).hexdigest()}
    manifest_path = target / MANIFEST
    try:
        fd = open_publish_folder(target, Path(opts.output_dir))  # before the lock is written into it
    except OSError as e:
        raise PublishError(f"--publish_dir {target}: {_why(e)}") from None
    try:
        # every write below goes into the folder opened, named by its descriptor; messages name target
        where = pinned(fd, target)
        try:
            _into(where, opts, dry_run, api, files, card, report, found)
        except (PublishError, UsageError, UploadError) as e:
            raise type(e)(str(e).replace(str(where), str(target))) from None
    finally:
        os.close(fd)

    report["report_path"] = str(manifest_path)
    return report

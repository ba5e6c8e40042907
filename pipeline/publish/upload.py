"""Upload of a published folder to a Hub dataset repository.

The token is whatever huggingface_hub finds by itself (HF_TOKEN, or the one `hf auth login` saved), never a
flag: flags end up in shell history and job specs. The upload is resumable: huggingface_hub's
upload_large_folder where it exists (0.25-1.x), and upload_folder in 2.x, which took over its resumable,
multi-commit mode. Remote shards of an earlier release that this one does not have are deleted, so the repo
holds exactly the folder.
"""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
LOCAL_ONLY = ".hardpos*"  # the publish manifest and lock: hardpos's bookkeeping, not part of the dataset


class UploadError(RuntimeError):
    pass


def check_repo_id(repo_id: str) -> None:
    if not REPO_ID.match(repo_id or ""):
        raise ValueError(f"--hub_repo must look like ORG/NAME, got {repo_id!r}")


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def hub_login(api=None):
    """huggingface_hub's HfApi (or `api`), once the Hub has said who is logged in; UploadError (one line) when there
    is no token or no network, before anything is written or sent."""
    if api is None:
        try:
            from huggingface_hub import HfApi
        except ImportError as e:
            raise UploadError(f"uploading needs huggingface_hub (pip install huggingface_hub): {e}") from None
        api = HfApi()
    try:
        api.whoami()
    except Exception as e:  # noqa: BLE001 - no token (LocalTokenNotFoundError), or no network (httpx, requests)
        raise UploadError(f"cannot reach the Hub as a logged-in user ({_first_line(e)}); set HF_TOKEN or run "
                          f"`hf auth login`, and check the network") from None
    return api


def upload(folder: str | Path, repo_id: str, private: bool = False, api=None) -> str:
    """Creates the dataset repo if needed, uploads the folder, removes stale remote data files; returns the URL.
    UploadError (one line) when the Hub refuses or the network fails; a rerun resumes."""
    check_repo_id(repo_id)
    api = hub_login(api)
    folder = Path(folder)
    try:
        api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
        if hasattr(api, "upload_large_folder"):
            api.upload_large_folder(repo_id=repo_id, folder_path=str(folder), repo_type="dataset", private=private,
                                    ignore_patterns=[LOCAL_ONLY])
        else:
            api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="dataset",
                              commit_message="hardpos release", ignore_patterns=[LOCAL_ONLY])
        local = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
                 if p.is_file() and not fnmatch.fnmatch(p.name, LOCAL_ONLY)}
        stale = [f for f in api.list_repo_files(repo_id=repo_id, repo_type="dataset")
                 if f.startswith("data/") and f not in local]
        if stale:
            from huggingface_hub import CommitOperationDelete

            api.create_commit(repo_id=repo_id, repo_type="dataset",
                              commit_message="hardpos release: remove stale shards",
                              operations=[CommitOperationDelete(path_in_repo=f) for f in stale])
    except Exception as e:  # noqa: BLE001 - the Hub's and the network's errors, whatever the client version
        raise UploadError(f"uploading {folder} to {repo_id} failed ({_first_line(e)}); the folder is complete, run "
                          f"publish again to resume") from None
    return f"https://huggingface.co/datasets/{repo_id}"

"""``cosyvoice-studio download``: fetch FunAudioLLM/CosyVoice2-0.5B (or, with ``--family cosyvoice3``,
FunAudioLLM/Fun-CosyVoice3-0.5B-2512) with progress and resume.

Tries huggingface_hub, then modelscope when it is installed. Each hub is probed first with a short
timeout, so with no network (or a blocked hub) the command fails within seconds with a clear message.
Partial downloads resume on the next run (the hubs keep incomplete files in the target's cache).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

#: Each family's official release: its Hugging Face repository, its ModelScope one, the default folder name.
RELEASES = {
    "cosyvoice2": ("FunAudioLLM/CosyVoice2-0.5B", "iic/CosyVoice2-0.5B", "CosyVoice2-0.5B"),
    "cosyvoice3": (
        "FunAudioLLM/Fun-CosyVoice3-0.5B-2512",
        "iic/Fun-CosyVoice3-0.5B-2512",
        "Fun-CosyVoice3-0.5B-2512",
    ),
}
REPO_ID, MODELSCOPE_ID, _ = RELEASES["cosyvoice2"]
PROBE_TIMEOUT_S = 5.0


class HubUnreachable(Exception):
    """A model hub cannot be reached or refused the download; the message says which and why."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "download",
        help="download the CosyVoice2-0.5B (or Fun-CosyVoice3-0.5B) model",
        description="Download the official release (huggingface_hub, then modelscope if installed); resumes.",
    )
    parser.add_argument(
        "--family",
        choices=tuple(RELEASES),
        default="cosyvoice2",
        help="which model: cosyvoice2 (CosyVoice2-0.5B, the default) or cosyvoice3 (Fun-CosyVoice3-0.5B-2512)",
    )
    parser.add_argument("--to", metavar="DIR", help="target folder (default: the data folder's models/)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=PROBE_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for a hub to answer before giving up on it",
    )
    parser.add_argument("--set-default", action="store_true", help="make it the studio's model folder")
    parser.add_argument("--from-studio", action="store_true", help=argparse.SUPPRESS)  # advice for the GUI
    parser.set_defaults(func=run)


def default_target(family: str = "cosyvoice2") -> Path:
    from studio.settings import data_dir

    return data_dir() / "models" / RELEASES[family][2]


def probe(url: str, timeout: float) -> None:
    """Raise HubUnreachable unless ``url`` answers an HTTP request within ``timeout`` seconds."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return
    except urllib.error.HTTPError:
        return  # it answered: reachable (authorisation and paths are the hub client's business)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HubUnreachable(f"{url} is not reachable ({reason})") from exc


def from_huggingface(target: Path, timeout: float, repo_id: str = REPO_ID) -> None:
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(int(max(1, timeout))))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    from huggingface_hub import constants, snapshot_download

    probe(constants.ENDPOINT, timeout)
    try:
        snapshot_download(repo_id=repo_id, local_dir=str(target))
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes a clear message
        raise HubUnreachable(f"huggingface_hub failed: {type(exc).__name__}: {exc}") from exc


def from_modelscope(target: Path, timeout: float, repo_id: str = MODELSCOPE_ID) -> None:
    if importlib.util.find_spec("modelscope") is None:
        raise HubUnreachable("modelscope is not installed (pip install modelscope to try that hub)")
    from modelscope.hub.api import HubApi
    from modelscope.hub.snapshot_download import snapshot_download

    probe(HubApi().endpoint, timeout)
    try:
        snapshot_download(repo_id, local_dir=str(target))
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes a clear message
        raise HubUnreachable(f"modelscope failed: {type(exc).__name__}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    hf_id, modelscope_id, folder_name = RELEASES[args.family]
    target = Path(args.to).expanduser() if args.to else default_target(args.family)
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create {target}: {exc}", file=sys.stderr)
        return 2
    problems = []
    hubs = (("huggingface_hub", from_huggingface, hf_id), ("modelscope", from_modelscope, modelscope_id))
    for name, fetch, repo_id in hubs:
        print(f"downloading {repo_id} into {target} through {name} ...", flush=True)
        try:
            fetch(target, args.timeout, repo_id)
        except HubUnreachable as exc:
            problems.append(f"{name}: {exc}")
            continue
        print(f"done: {target}")
        if args.set_default:
            from studio.settings import load_settings, save_settings

            settings = load_settings()
            settings.model_dir = str(target)
            save_settings(settings)
            print("set as the studio's model folder")
        else:
            print(f"use it with: cosyvoice-studio synth --model {target} ...  (or --set-default)")
        return 0
    if created and not any(target.iterdir()):
        target.rmdir()  # no empty folder that looks like a model left behind
    print("error: the model could not be downloaded:\n  " + "\n  ".join(problems), file=sys.stderr)
    use = "choose it with “Choose a model folder…”" if args.from_studio else "pass it with --model"
    print(
        f"fix: check the network or proxy (HTTPS_PROXY), or copy a {folder_name} folder onto this "
        f"computer by hand and {use}",
        file=sys.stderr,
    )
    return 1

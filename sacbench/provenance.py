"""Where and with what a run was made: the facts metadata.json records."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import sacbench

PACKAGE_DIR = Path(sacbench.__file__).resolve().parent


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _git(*arguments: str) -> str | None:
    try:
        completed = subprocess.run(
            ["git", "-C", str(PACKAGE_DIR.parent), *arguments],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def sacbench_version() -> dict[str, Any]:
    """The role of CleanRL's autotag: which code produced the numbers."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "version": sacbench.__version__,
        "git_describe": _git("describe", "--tags", "--always", "--dirty"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "gymnasium", "mujoco", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def host_facts(*, device: str, torch_threads: int) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpu_model(device),
        "device": device,
        "torch_threads": torch_threads,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }

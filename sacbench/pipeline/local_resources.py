"""How much memory local runs may schedule, and the check that a job fits in it.

Snakemake enforces a resource locally only when it has a total (`--resources mem_mb=N`). Without
one, `snakemake --cores 18` starts all 18 train jobs at once whatever the machine has, and the
kernel kills some of them hours in. The workflow therefore sets a default total from the memory
this machine (or the container or job it runs in) has available when Snakemake starts, less some
headroom; `--resources mem_mb=N` replaces it.

Snakemake also silently lowers a job's request to the total when the request is larger, so a job
that cannot fit would start anyway and be killed later. `check_job_fits` refuses it up front.
"""

from __future__ import annotations

import math
from pathlib import Path

import psutil

# Kept free for the OS, Snakemake itself and the report jobs: a tenth of what is available.
HEADROOM_FRACTION = 0.1
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


class MemoryBudgetError(RuntimeError):
    """A job needs more memory than local runs may schedule; the message names the run."""


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def cgroup_memory_left_bytes(
    *, proc_cgroup: Path = PROC_SELF_CGROUP, cgroup_root: Path = CGROUP_ROOT
) -> int | None:
    """Bytes this process's memory cgroup and its ancestors still allow, or None without limit.

    Containers, Slurm allocations and systemd slices cap memory through cgroups (v2's
    memory.max, v1's memory.limit_in_bytes), which the machine-wide figure does not show.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates: list[tuple[Path, str, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            for mount in (cgroup_root, cgroup_root / "unified"):
                candidates.append((mount / path.lstrip("/"), "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            candidates.append(
                (
                    cgroup_root / "memory" / path.lstrip("/"),
                    "memory.limit_in_bytes",
                    "memory.usage_in_bytes",
                )
            )
    left: int | None = None
    for directory, limit_name, usage_name in candidates:
        # A parent's limit binds its children too: check every level up to the mount.
        for level in (directory, *directory.parents):
            if not str(level).startswith(str(cgroup_root)):
                break
            limit, usage = _read_int(level / limit_name), _read_int(level / usage_name)
            # cgroup v1 reports "no limit" as a huge number rather than "max".
            if limit is None or usage is None or limit >= 2**62:
                continue
            room = max(limit - usage, 0)
            left = room if left is None else min(left, room)
    return left


def available_memory_mb(
    *, proc_cgroup: Path = PROC_SELF_CGROUP, cgroup_root: Path = CGROUP_ROOT
) -> int:
    """Memory available now: the machine's, or the memory cgroup's room when that is smaller."""
    available = psutil.virtual_memory().available
    cgroup_left = cgroup_memory_left_bytes(proc_cgroup=proc_cgroup, cgroup_root=cgroup_root)
    if cgroup_left is not None:
        available = min(available, cgroup_left)
    return available // 2**20


def default_memory_budget_mb(*, available_mb: int) -> int:
    """The default `mem_mb` total for local runs: what is available, less the headroom."""
    if not isinstance(available_mb, int) or available_mb <= 0:
        raise ValueError(f"available_mb must be a positive integer, got {available_mb!r}")
    return max(math.floor(available_mb * (1 - HEADROOM_FRACTION)), 1)


def check_job_fits(*, run: str, need_mb: int, total_mb: int | None, attempt: int = 1) -> int:
    """The memory a job may request locally; raises when its first attempt cannot fit.

    A retry asks for more memory than the first attempt (an out-of-memory retry on a cluster);
    locally the total is all there is, so a retry gets at most the total.
    """
    if total_mb is None:
        return need_mb
    if attempt == 1 and need_mb > total_mb:
        raise MemoryBudgetError(
            f"train job {run} needs mem_mb={need_mb} (replay buffer and runtime), more than the "
            f"local total mem_mb={total_mb}; it would be killed when its buffer fills. Give it "
            "a machine with more memory, a smaller buffer_size, or a larger total with "
            "--resources mem_mb=N"
        )
    return min(need_mb, total_mb)

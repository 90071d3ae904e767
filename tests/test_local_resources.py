"""The local memory total and the check that a train job fits in it.

The cgroup files are laid out in a temp dir exactly as the kernel shows them (cgroup v1's
memory.limit_in_bytes / memory.usage_in_bytes, v2's memory.max / memory.current), so the parsing
is tested on both layouts; test_commands.py runs Snakemake inside a real cgroup.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sacbench.pipeline.local_resources import (
    HEADROOM_FRACTION,
    MemoryBudgetError,
    available_memory_mb,
    cgroup_memory_left_bytes,
    check_job_fits,
    default_memory_budget_mb,
)

GIB = 2**30
V1_UNLIMITED = 9223372036854771712  # what cgroup v1 reports for "no limit"


def write_cgroup(directory: Path, **files: int | str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (directory / name.replace("_", ".", 1)).write_text(f"{value}\n")


def proc_cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


def test_cgroup_v2_limit_less_usage(tmp_path: Path):
    root = tmp_path / "cgroup"
    write_cgroup(root / "job", memory_max=4 * GIB, memory_current=1 * GIB)
    left = cgroup_memory_left_bytes(
        proc_cgroup=proc_cgroup(tmp_path, "0::/job\n"), cgroup_root=root
    )
    assert left == 3 * GIB


def test_cgroup_v1_parent_limit_binds_the_child(tmp_path: Path):
    root = tmp_path / "cgroup"
    write_cgroup(
        root / "memory" / "slurm",
        memory_limit_in_bytes=2 * GIB,
        memory_usage_in_bytes=GIB // 2,
    )
    write_cgroup(
        root / "memory" / "slurm" / "job_7",
        memory_limit_in_bytes=V1_UNLIMITED,
        memory_usage_in_bytes=GIB // 4,
    )
    text = "4:memory:/slurm/job_7\n3:cpuset:/\n0::/\n"
    left = cgroup_memory_left_bytes(proc_cgroup=proc_cgroup(tmp_path, text), cgroup_root=root)
    assert left == 2 * GIB - GIB // 2


@pytest.mark.parametrize(
    "text, files",
    [
        ("0::/\n", {"memory_max": "max", "memory_current": GIB}),
        ("4:memory:/\n", {"memory_limit_in_bytes": V1_UNLIMITED, "memory_usage_in_bytes": 1}),
        ("4:cpu:/\n", {}),
    ],
    ids=["v2-max", "v1-unlimited", "no-memory-controller"],
)
def test_no_cgroup_limit_means_none(tmp_path: Path, text: str, files: dict):
    root = tmp_path / "cgroup"
    write_cgroup(root / ("memory" if "memory:" in text else ""), **files)
    assert (
        cgroup_memory_left_bytes(proc_cgroup=proc_cgroup(tmp_path, text), cgroup_root=root) is None
    )


def test_available_memory_takes_the_smaller_of_machine_and_cgroup(tmp_path: Path):
    root = tmp_path / "cgroup"
    write_cgroup(root / "small", memory_max=256 * 2**20, memory_current=0)
    small = available_memory_mb(proc_cgroup=proc_cgroup(tmp_path, "0::/small\n"), cgroup_root=root)
    assert small == 256
    unlimited = available_memory_mb(proc_cgroup=tmp_path / "missing", cgroup_root=root)
    assert unlimited > 256


def test_default_budget_keeps_headroom():
    assert default_memory_budget_mb(available_mb=10_000) == int(10_000 * (1 - HEADROOM_FRACTION))
    with pytest.raises(ValueError, match="available_mb must be a positive integer, got 0"):
        default_memory_budget_mb(available_mb=0)


def test_a_job_that_fits_keeps_its_request():
    assert check_job_fits(run="v/Hopper-v4/1", need_mb=1600, total_mb=20_000) == 1600
    assert check_job_fits(run="v/Hopper-v4/1", need_mb=1600, total_mb=None) == 1600


def test_a_job_larger_than_the_total_is_refused_with_its_name_need_and_total():
    with pytest.raises(MemoryBudgetError) as raised:
        check_job_fits(run="sac/Humanoid-v4/2", need_mb=4620, total_mb=4000)
    message = str(raised.value)
    assert "sac/Humanoid-v4/2" in message
    assert "mem_mb=4620" in message and "mem_mb=4000" in message
    assert "--resources mem_mb=N" in message


def test_a_retry_asks_for_at_most_the_total():
    assert check_job_fits(run="v/Hopper-v4/1", need_mb=3200, total_mb=3000, attempt=2) == 3000

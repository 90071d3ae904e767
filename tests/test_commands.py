"""The local commands users type, run exactly as written, in a copy of the workflow.

`snakemake results/sac_runtimes.md` must run locally with no other flag (the workflow profile
gives it every core), and `snakemake --cores 18` must never schedule more training memory than the
machine has: train jobs queue when the memory runs short, and a job that can never fit fails
before anything starts. The short memory is made real by running Snakemake inside a memory
cgroup, as a container or a cluster allocation would; the Slurm command is run against the
single-node cluster in test_slurm.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sacbench.pipeline import config as sacbench_config
from sacbench.pipeline.local_resources import HEADROOM_FRACTION
from tests.workflow_copies import run_verbatim, workflow_copy

TINY_TRAIN = {
    "total_timesteps": 500,
    "learning_starts": 100,
    "batch_size": 32,
    "buffer_size": 500,
    "checkpoint_interval": 100,
}
TWO_RUNS = {"env_ids": ["InvertedPendulum-v4", "Pusher-v4"], "seeds": [1], "train": TINY_TRAIN}

pytestmark = pytest.mark.slow


def train_sessions(workdir: Path) -> list[tuple[dt.datetime, dt.datetime]]:
    """(start, end) of every training session, from the run dirs' metadata."""
    sessions = []
    for metadata in sorted((workdir / "results" / "runs").glob("*/*/*/metadata.json")):
        for session in json.loads(metadata.read_text())["sessions"]:
            sessions.append(
                (
                    dt.datetime.fromisoformat(session["started_at"]),
                    dt.datetime.fromisoformat(session["ended_at"]),
                )
            )
    return sorted(sessions)


def most_train_jobs_at_once(snakemake_log: str) -> int:
    """The most train jobs running at once, from the order of Snakemake's log lines: a job's
    `rule train:` header when it starts, `Finished jobid: N (Rule: train)` when it ends. (The
    runs' own timestamps have one-second resolution, and on a fast machine two tiny runs start and
    end within the same second, whether they ran at once or not.)"""
    running = most = 0
    for line in snakemake_log.splitlines():
        if re.fullmatch(r"(local)?rule train:", line.strip()):
            running += 1
            most = max(most, running)
        elif re.search(r"Finished jobid: \d+ \(Rule: train\)", line):
            running -= 1
    return most


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A fresh cgroup v1 memory group of this machine's; yields its folder. Needs root."""
    hierarchy = Path("/sys/fs/cgroup/memory")
    if not (hierarchy / "cgroup.procs").exists() or not os.access(hierarchy, os.W_OK):
        pytest.skip("needs a writable cgroup v1 memory hierarchy (root)")
    group = hierarchy / f"sacbench-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        # The processes have exited; their group can go.
        group.rmdir()


def limit_cgroup(group: Path, *, megabytes: int) -> None:
    (group / "memory.limit_in_bytes").write_text(str(megabytes * 2**20))


def test_plain_target_runs_locally_on_every_core(tmp_path: Path):
    workdir = workflow_copy(tmp_path, TWO_RUNS)

    result = run_verbatim(workdir, "snakemake results/sac_runtimes.md")

    assert result.returncode == 0, result.stderr[-3000:]
    assert (workdir / "results" / "sac_runtimes.md").is_file()
    assert f"Provided cores: {os.cpu_count()}" in result.stderr
    # Only what the table needs: no returns table, no plots.
    assert not (workdir / "results" / "sac.md").exists()
    assert not (workdir / "results" / "plots").exists()
    if (os.cpu_count() or 1) >= 2:
        assert most_train_jobs_at_once(result.stderr) == 2, "two cores should train two at once"


def test_cores_18_queues_train_jobs_that_do_not_fit_in_memory_together(
    tmp_path: Path, memory_cgroup: Path
):
    need = sacbench_config.train_memory_mb(env_id="Pusher-v4", buffer_size=500)
    # Room for one train job's declared memory, not two.
    limit_mb = int(1.4 * need / (1 - HEADROOM_FRACTION))
    limit_cgroup(memory_cgroup, megabytes=limit_mb)
    workdir = workflow_copy(tmp_path, TWO_RUNS)

    result = run_verbatim(
        workdir, "snakemake --cores 18", cgroup_procs=memory_cgroup / "cgroup.procs"
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert (workdir / "results" / "sac.md").is_file()
    sessions = train_sessions(workdir)
    assert len(sessions) == 2
    assert most_train_jobs_at_once(result.stderr) == 1, "train jobs ran at once"
    assert "Provided resources: mem_mb=" in result.stderr


def test_a_run_that_can_never_fit_fails_before_anything_starts(tmp_path: Path, memory_cgroup: Path):
    limit_cgroup(memory_cgroup, megabytes=2500)
    config = {
        "env_ids": ["InvertedPendulum-v4", "Humanoid-v4"],
        "seeds": [1],
        "train": {**TINY_TRAIN, "buffer_size": 1_000_000},
    }
    workdir = workflow_copy(tmp_path, config)

    result = run_verbatim(
        workdir, "snakemake --cores 18", cgroup_procs=memory_cgroup / "cgroup.procs"
    )

    assert result.returncode != 0
    need = sacbench_config.train_memory_mb(env_id="Humanoid-v4", buffer_size=1_000_000)
    assert f"train job sac_continuous_action/Humanoid-v4/1 needs mem_mb={need}" in result.stderr
    assert "local total mem_mb=" in result.stderr
    assert not (workdir / "results" / "runs").exists(), "nothing may start"


def test_resources_mem_mb_replaces_the_default_total(tmp_path: Path):
    workdir = workflow_copy(tmp_path, TWO_RUNS)

    result = run_verbatim(workdir, "snakemake -n --cores 18 --resources mem_mb=1000")

    assert result.returncode != 0
    output = result.stdout + result.stderr  # a dry run reports on stdout
    assert "needs mem_mb=" in output and "local total mem_mb=1000;" in output

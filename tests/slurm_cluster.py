"""Helpers for the Slurm tests: the single-node cluster of scripts/slurm-cluster.sh, Snakemake
runs through profiles/slurm, and evidence of what Slurm ran (job ids, states, logs)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
SLURM_PROFILE = REPO / "profiles" / "slurm"
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")

# What a single-node test cluster needs on top of profiles/slurm: it has no accounting database,
# so the executor must ask squeue (the cluster's MinJobAge keeps finished jobs visible), and a
# short first status check, so that tiny jobs are seen finishing promptly.
TEST_CLUSTER_OPTIONS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "2",
)

SUBMITTED = re.compile(
    r"Job (?P<snakemake_id>\d+) has been submitted with SLURM jobid (?P<slurm_id>\d+) "
    r"\(log: (?P<log>.+?)\)\.$",
    re.MULTILINE,
)
# The executor names logs <logdir>/rule_<rule>/[<wildcard values joined by _>/]<jobid>.log.
LOG_NAME = re.compile(r"/rule_(?P<rule>[^/]+)/(?:(?P<wildcards>[^/]+)/)?\d+\.log$")


def missing_binaries() -> list[str]:
    return [
        name
        for name in SLURM_BINARIES
        if shutil.which(name) is None and not Path("/usr/sbin", name).exists()
    ]


def cluster(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTER_SCRIPT), command], capture_output=True, text=True, timeout=300
    )


@dataclass(frozen=True)
class Submission:
    """One sbatch made by the executor, as Snakemake reported it."""

    slurm_id: str
    rule: str
    wildcards: str
    log: Path


def submissions(output: str) -> list[Submission]:
    """Every job submission a Snakemake run reported, in order."""
    found = []
    for match in SUBMITTED.finditer(output):
        log = Path(match["log"])
        named = LOG_NAME.search(match["log"])
        assert named, f"unexpected Slurm log path {log}"
        found.append(
            Submission(
                slurm_id=match["slurm_id"],
                rule=named["rule"],
                wildcards=named["wildcards"] or "",
                log=log,
            )
        )
    return found


def write_yaml(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False))


def snakemake_env(**extra: str) -> dict[str, str]:
    """The environment for Snakemake; Slurm jobs inherit it (sbatch --export=ALL), so the rules'
    `python` must be this interpreter even when the venv is not activated."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def snakemake_command(*args: str, profile: Path | None = SLURM_PROFILE) -> list[str]:
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
    if profile is not None:
        command += ["--profile", str(profile), *TEST_CLUSTER_OPTIONS]
    return [*command, *args]


def run_snakemake(
    workdir: Path, *args: str, profile: Path | None = SLURM_PROFILE, timeout: float = 600, **env
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        snakemake_command(*args, profile=profile),
        cwd=workdir,
        env=snakemake_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class SlurmObservations:
    """What squeue showed while a test ran: job id -> (comment, every state seen)."""

    comments: dict[str, str] = field(default_factory=dict)
    states: dict[str, list[str]] = field(default_factory=dict)

    def record(self, job_id: str, state: str, comment: str) -> None:
        self.comments[job_id] = comment
        seen = self.states.setdefault(job_id, [])
        if not seen or seen[-1] != state:
            seen.append(state)


@contextmanager
def watch_squeue(interval: float = 0.5) -> Iterator[SlurmObservations]:
    """Poll squeue in the background; independent evidence of every job and its state changes."""
    observations = SlurmObservations()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            listing = subprocess.run(
                ["squeue", "--states=all", "--noheader", "--format=%i|%T|%k"],
                capture_output=True,
                text=True,
            )
            for line in listing.stdout.splitlines():
                job_id, state, comment = line.split("|", 2)
                observations.record(job_id, state, comment)
            stop.wait(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield observations
    finally:
        stop.set()
        thread.join()


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

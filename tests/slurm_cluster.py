"""Helpers for the Slurm tests: the single-node cluster of scripts/slurm-cluster.sh, Snakemake
runs through profiles/slurm, and evidence of what Slurm ran (job ids, states, logs)."""

from __future__ import annotations

import os
import re
import shlex
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
# What a clone of the repository holds for Snakemake: a copy links these and adds a config.yaml.
WORKFLOW_PARTS = ("Snakefile", "workflow", "profiles", "envs", "config")
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
SLURM_PROFILE = REPO / "profiles" / "slurm"
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")

# What a single-node test cluster needs on top of profiles/slurm: it has no accounting database,
# so the executor must ask squeue (the cluster's MinJobAge keeps finished jobs visible), and a
# short first status check, so that tiny jobs are seen finishing promptly.
STATUS_SECONDS = "2"
TEST_CLUSTER_OPTIONS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    STATUS_SECONDS,
    "--seconds-between-status-checks",
    STATUS_SECONDS,
)
# The same settings as profiles/slurm's site variables, for commands typed as docs/slurm.md gives
# them.
TEST_CLUSTER_ENV = {
    "SACBENCH_SLURM_STATUS_COMMAND": "squeue",
    "SACBENCH_SLURM_STATUS_SECONDS": STATUS_SECONDS,
}

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


def next_job_id() -> int:
    """The id slurmctld will give the next job. Every sbatch takes the next id, so the
    difference of two readings counts the jobs submitted in between, whoever submitted them."""
    shown = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True
    )
    found = re.search(r"^NEXT_JOB_ID\s*=\s*(\d+)\s*$", shown.stdout, re.MULTILINE)
    assert found, shown.stdout
    return int(found[1])


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


def merged(base: dict, override: dict) -> dict:
    """`override` over `base`, mappings merged key by key, as Snakemake merges config files."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def smoke_preset() -> dict:
    """config.yaml with config/smoke.yaml over it: the smoke preset as one config."""
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    return merged(base, yaml.safe_load((REPO / "config" / "smoke.yaml").read_text()))


def workflow_copy(root: Path, config: dict) -> Path:
    """A folder laid out like a clone of the repository (its parts linked), whose config.yaml is
    `config`: the commands of the docs run in it exactly as written."""
    root.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        (root / part).symlink_to(REPO / part)
    write_yaml(root / "config.yaml", config)
    return root


def run_verbatim(
    workdir: Path, command: str, *, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess[str]:
    """`command` as a user types it in `workdir`, with the environment installed (the venv's
    tools first on PATH) and the given environment variables set."""
    return subprocess.run(
        shlex.split(command),
        cwd=workdir,
        env=snakemake_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


@dataclass(frozen=True)
class Request:
    """What a job asked Slurm for, as squeue shows it."""

    time_limit_minutes: int | None
    cpus: int
    memory_mb: int


def slurm_minutes(text: str) -> int | None:
    """squeue's [days-][hours:]minutes:seconds (or UNLIMITED) as whole minutes."""
    if text in ("UNLIMITED", "INVALID", "NOT_SET"):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    total = (int(days or 0) * 24 + hours) * 60 + minutes
    return total + (1 if seconds else 0)


def slurm_megabytes(text: str) -> int:
    """squeue's memory column (e.g. 1625M, 4G) in MB."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}
    return round(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


@dataclass
class SlurmObservations:
    """What squeue showed while a test ran: job id -> comment, every state seen, the request."""

    comments: dict[str, str] = field(default_factory=dict)
    states: dict[str, list[str]] = field(default_factory=dict)
    requests: dict[str, Request] = field(default_factory=dict)

    def record(self, job_id: str, state: str, comment: str, request: Request) -> None:
        self.comments[job_id] = comment
        self.requests[job_id] = request
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
                ["squeue", "--states=all", "--noheader", "--format=%i|%T|%l|%C|%m|%k"],
                capture_output=True,
                text=True,
            )
            for line in listing.stdout.splitlines():
                job_id, state, limit, cpus, memory, comment = line.split("|", 5)
                request = Request(slurm_minutes(limit), int(cpus), slurm_megabytes(memory))
                observations.record(job_id, state, comment, request)
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

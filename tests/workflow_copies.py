"""Helpers for tests that run Snakemake the way users do: in a folder that looks like a clone of
the repository (Snakefile, workflow/, profiles/, envs/, config/ linked to this checkout) with
its own config.yaml, calling `snakemake` from the venv by name."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "profiles", "envs", "config")


def workflow_copy(parent: Path, config: dict, *, name: str = "sacbench") -> Path:
    """A folder under `parent` that looks like a clone of the repository; config.yaml = `config`."""
    workdir = parent / name
    workdir.mkdir()
    for part in WORKFLOW_PARTS:
        (workdir / part).symlink_to(REPO / part)
    write_config(workdir, config)
    return workdir


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def interruptible() -> None:
    """For Popen(preexec_fn=...): SIGINT's default action, as in a terminal. A test suite started
    in the background of a non-interactive shell (as CI may run it) passes SIGINT on ignored,
    and a Python started that way never turns Ctrl-C into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def venv_environment() -> dict[str, str]:
    """This environment, with the venv's tools (snakemake, tensorboard) first on PATH, as an
    activated venv has them."""
    environment = dict(os.environ)
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    return environment


def run_verbatim(
    workdir: Path,
    command: str,
    *,
    cgroup_procs: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`command` as a user types it, with the venv's tools first on PATH."""
    environment = venv_environment() | (extra_env or {})
    argv = shlex.split(command)
    if cgroup_procs is not None:
        # Enter the cgroup, then become the command: Snakemake and its jobs all live inside it.
        argv = ["sh", "-c", f'echo $$ > {cgroup_procs} && exec "$@"', "sh", *argv]
    return subprocess.run(
        argv, cwd=workdir, env=environment, capture_output=True, text=True, timeout=900
    )

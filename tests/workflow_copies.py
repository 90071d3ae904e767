"""Helpers for tests that run Snakemake the way users do: in a folder that looks like a clone of
the repository (Snakefile, workflow/, profiles/, envs/, config/ linked to this checkout) with
its own config.yaml, calling `snakemake` from the venv by name."""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "profiles", "envs", "config")
# The README's first command, less its setup.
SMOKE_COMMAND = "snakemake --profile profiles/smoke"


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


def default_config_copy(parent: Path) -> Path:
    """A workflow copy whose config.yaml is the repository's own, as in a fresh clone."""
    workdir = workflow_copy(parent, {})
    shutil.copy(REPO / "config.yaml", workdir / "config.yaml")
    return workdir


def smoke_preset_run(tmp_path_factory) -> Path:
    """The README's smoke command, run once per test session in a fresh clone's copy of the
    workflow: tests/test_readme.py checks what it made, and tests/test_slurm.py compares the same
    preset on Slurm with it. pytest-xdist's workers share it: the first to ask runs it while any
    other waits on the lock. Its users only read it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    root = base / "smoke-preset"
    finished = root / "finished"
    with (base / "smoke-preset.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not finished.exists():
            shutil.rmtree(root, ignore_errors=True)  # a run that failed in another worker
            root.mkdir()
            workdir = default_config_copy(root)
            result = run_verbatim(workdir, SMOKE_COMMAND)
            assert result.returncode == 0, (
                f"{SMOKE_COMMAND}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
            finished.touch()
    return root / "sacbench"

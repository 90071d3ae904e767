"""Weights & Biases tracking (`--track`): one W&B run per run dir, fed from the event log.

As CleanRL's `--track`, W&B reads the scalars from the TensorBoard event files the trainer
writes (its TensorBoard sync), so the two always hold the same numbers; the run's config is
every argument plus the provenance metadata.json records, and a tag names the code version.

- wandb is imported here, inside `start_tracking`, and only for `--track`: an untracked run
  never loads it.
- W&B's files go to the run dir's `wandb/` folder: an offline run (WANDB_MODE=offline) stays
  with its run and moves with it; `wandb sync RUN_DIR/wandb` uploads it later.
- The W&B run id is kept in the run dir (`wandb_run_id.txt`), so every session of a run, resumed
  or not, continues the same W&B run (resume="allow").
- W&B is told to read the event files where they are, not to keep copies of them: a copy in
  `wandb/` would sit inside the folder it watches (and `tensorboard --logdir` would show every
  curve twice).
- W&B reads only event files started after its session began (on this host), so a resumed
  session sends only its own steps. Steps that a killed session had already flushed after its
  last checkpoint are logged again by the next session, as the trainer retrains them: W&B then
  holds two points at those global steps, one per session; the event files hold each once.
"""

from __future__ import annotations

import os
import secrets
import string
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacbench.atomic import write_atomically
from sacbench.provenance import host_facts, package_versions, sacbench_version
from sacbench.sac.args import Args

WANDB_DIR_NAME = "wandb"  # what wandb.init(dir=run_dir) creates in the run dir
RUN_ID_FILE_NAME = "wandb_run_id.txt"
RUN_ID_ALPHABET = string.ascii_lowercase + string.digits  # the characters of W&B's own ids
RUN_ID_LENGTH = 8
TAG_MAX_LENGTH = 64  # W&B refuses longer tags
# The x-axis of every synced scalar: TensorBoard's step, which is the trainer's global_step.
STEP_METRIC = "global_step"


@dataclass
class Tracker:
    """A started W&B run (`wandb.sdk.wandb_run.Run`)."""

    run: Any


def run_name(args: Args) -> str:
    """CleanRL's run name without its start time: every session of a run shares it."""
    return f"{args.env_id}__{args.exp_name}__{args.seed}"


def version_tag(*, version: Mapping[str, Any]) -> str:
    """The code version as a W&B tag, the role of CleanRL's autotag: `git describe` (its tag or
    commit, and `-dirty` for uncommitted changes), or the package version outside a checkout."""
    described = version.get("git_describe")
    if described:
        tag = f"sacbench-{described}"
    else:
        tag = f"sacbench-{version['version']}" + ("-dirty" if version.get("git_dirty") else "")
    return tag[:TAG_MAX_LENGTH]


def run_tags(*, version: Mapping[str, Any], environment: Mapping[str, str]) -> list[str]:
    """The version tag, then the tags of WANDB_TAGS (comma-separated, as CleanRL's benchmark
    utility passes them), which an explicit `tags=` would otherwise replace."""
    tags = [version_tag(version=version)]
    for tag in environment.get("WANDB_TAGS", "").split(","):
        if tag.strip() and tag.strip() not in tags:
            tags.append(tag.strip()[:TAG_MAX_LENGTH])
    return tags


def stable_run_id(*, run_dir: Path) -> str:
    """The W&B run id of this run dir: read from RUN_ID_FILE_NAME, made and saved the first time."""
    path = run_dir / RUN_ID_FILE_NAME
    if path.exists():
        run_id = path.read_text().strip()
        if not run_id or any(character not in RUN_ID_ALPHABET for character in run_id):
            raise RuntimeError(
                f"{path} should hold a W&B run id (letters and digits), got {run_id!r}; "
                "remove it to start a new W&B run for this run dir"
            )
        return run_id
    # Not from the global RNGs: tracking must not change what a run draws.
    run_id = "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(RUN_ID_LENGTH))
    write_atomically(path, run_id + "\n")
    return run_id


def tracked_config(*, args: Args, device: str) -> dict[str, Any]:
    """Every argument, and the provenance metadata.json records (code version, packages, host)."""
    return {
        **vars(args),
        "sacbench": sacbench_version(),
        "versions": package_versions(),
        "host": host_facts(device=device, torch_threads=args.threads),
    }


def start_tracking(*, args: Args, run_dir: Path, device: str) -> Tracker | None:
    """Start (or continue) the run dir's W&B run when --track is given; None otherwise.

    Must run before the SummaryWriter is created: W&B learns of event files from the writer.
    """
    if not args.track:
        return None
    import wandb  # only here: without --track nothing imports wandb

    run_id = stable_run_id(run_dir=run_dir)
    config = tracked_config(args=args, device=device)
    # The event files' folder is the W&B root: the tags keep their names (no prefix).
    wandb.tensorboard.patch(root_logdir=str(run_dir), save=False)
    try:
        run = wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            id=run_id,
            resume="allow",
            name=run_name(args),
            dir=str(run_dir),
            config=config,
            tags=run_tags(version=config["sacbench"], environment=os.environ),
        )
    except Exception as error:
        wandb.tensorboard.unpatch()
        raise RuntimeError(
            f"--track: Weights & Biases did not start ({type(error).__name__}: {error}); log in "
            "with `wandb login` (or set WANDB_API_KEY), or set WANDB_MODE=offline to record the "
            "run in its run dir and upload it later with `wandb sync`"
        ) from error
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC)
    return Tracker(run=run)


def finish_tracking(tracker: Tracker | None, *, exit_code: int, stopped: bool) -> None:
    """Close the W&B run after the event log is closed (W&B reads it to its end first).

    A run stopped by a signal is marked preempting: it is checkpointed and resumes. A W&B
    failure here is reported, not raised: training and its records are already safe on disk,
    and a failed job would make Snakemake delete the run's completion record.
    """
    if tracker is None:
        return
    try:
        if stopped:
            tracker.run.mark_preempting()
        tracker.run.finish(exit_code=exit_code)
    except Exception as error:  # noqa: BLE001 - any W&B failure: report it, keep the exit status
        print(
            f"sacbench.train: warning: closing the W&B run failed: {type(error).__name__}: {error}",
            file=sys.stderr,
        )

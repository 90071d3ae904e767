"""What a run dir's records say, checked before a session changes anything.

A session relies on metadata.json (which run this is), the newest usable checkpoint
(checkpoint/state.pt, else the one before it, checkpoint/state.prev.pt), the replay buffer
chunks that checkpoint names and the prefix of each event file that it recorded. `inspect`
reads and checks them all before training starts, so that a missing, truncated or garbled
record is found then, never as a crash mid-run, and a finished run is never marked complete
with part of its history gone. RunDir decides what to do with the answer: resume, repair from
what is intact, or refuse naming the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sacbench.events import EventLogError, check_event_file_prefix
from sacbench.tags import EVENT_FILE_MARKER
from sacbench.training.errors import RunDirError

METADATA_FILE = "metadata.json"
PROGRESS_FILE = "progress.json"
COMPLETE_FILE = "complete.json"
CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.pt"
PREVIOUS_STATE_FILE = "state.prev.pt"
# The temporary files of sacbench's atomic writes into a run dir (sacbench.atomic: mkstemp's
# ".{name}.XXXXXXXX.tmp"), which a kill during the write leaves behind. Only these are removed.
STRAY_TEMPORARY = re.compile(
    r"\.(state\.pt|state\.prev\.pt|rows-\d+-\d+\.npz|metadata\.json|progress\.json"
    r"|complete\.json|wandb_run_id\.txt|[^/]+\.cleanrl_model)\.[a-z0-9_]{8}\.tmp"
)


@dataclass
class Records:
    """What inspect() found."""

    metadata: dict[str, Any] | None
    """metadata.json's object, when it is a usable sacbench record"""
    metadata_problem: str | None
    """why it is not ("missing", "not valid JSON (...)", ...), None when it is"""
    checkpoint: dict[str, Any] | None = None
    """the newest checkpoint whose records are all intact: an unfinished run's state to resume
    from, or a finished run's final state"""
    checkpoint_file: Path | None = None
    passed_over: dict[Path, str] = field(default_factory=dict)
    """checkpoint files that were not usable, each with why"""
    finished_problem: str | None = None
    """why a final state that loads cannot be trusted (its history is damaged)"""

    def recorded_run_args(self) -> dict[str, Any] | None:
        """The run's defining args: metadata.json's, else those its checkpoint records."""
        if self.metadata is not None:
            return self.metadata["args"]
        if self.checkpoint is not None and isinstance(self.checkpoint.get("run_args"), dict):
            return self.checkpoint["run_args"]
        return None


def remove_stray_temporaries(run_dir: Path) -> list[Path]:
    """Remove the temporary files that a kill during an atomic write left; the removed paths."""
    removed = []
    for folder in (run_dir, run_dir / CHECKPOINT_DIR):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if STRAY_TEMPORARY.fullmatch(path.name) and path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def check_record_kinds(run_dir: Path) -> None:
    """A record's name taken by a folder (or a checkpoint folder that is a file) is refused."""
    for name in (METADATA_FILE, PROGRESS_FILE, COMPLETE_FILE):
        path = run_dir / name
        if path.exists() and not path.is_file():
            raise RunDirError(
                f"{path} is a folder or other non-file, where sacbench keeps its {name}: "
                "move it away, then run this again; nothing was changed"
            )
    checkpoint_dir = run_dir / CHECKPOINT_DIR
    if checkpoint_dir.exists() and not checkpoint_dir.is_dir():
        raise RunDirError(
            f"{checkpoint_dir} is a file, where sacbench keeps its checkpoints: move it away, "
            "then run this again; nothing was changed"
        )


def read_metadata(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(metadata.json's object, None), or (None, why it cannot be used)."""
    if not path.exists():
        return None, "missing"
    try:
        content = json.loads(path.read_text())
    except OSError as error:
        return None, f"unreadable ({error.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"damaged (not valid JSON: {error})"
    if not isinstance(content, dict):
        return None, f"damaged (a JSON {type(content).__name__}, not an object)"
    if not isinstance(content.get("args"), dict):
        return None, "damaged (no args object)"
    if not isinstance(content.get("sessions", []), list):
        return None, "damaged (its sessions are not a list)"
    return content, None


def event_files(run_dir: Path) -> list[Path]:
    return sorted(path for path in run_dir.glob(f"*{EVENT_FILE_MARKER}*") if path.is_file())


def _event_files_problem(run_dir: Path, state: dict[str, Any]) -> str | None:
    """Why the event files that `state` records are not as it recorded them, or None.

    An unfinished run relies on the first `size` bytes of each (the rest is cut on resume); a
    finished run on each file whole, and on no other."""
    finished, step = bool(state.get("finished")), state.get("global_step")
    recorded = state.get("event_files", [])
    for entry in recorded:
        path, size = run_dir / entry["name"], entry["size"]
        if not path.is_file():
            return (
                f"event file {path}, which the checkpoint at step {step} records ({size} "
                "bytes), is missing: the steps it logged are lost"
            )
        if finished and path.stat().st_size != size:
            return (
                f"event file {path} has {path.stat().st_size} bytes, but the finished run "
                f"recorded {size}"
            )
        try:
            check_event_file_prefix(path, size)
        except EventLogError as error:
            return f"event file {error} (the checkpoint at step {step} relies on {size} bytes)"
    names = {entry["name"] for entry in recorded}
    extra = [path.name for path in event_files(run_dir) if path.name not in names]
    if finished and extra:
        return f"event files {', '.join(extra)} in {run_dir} are not part of the finished run"
    return None


def checkpoint_problem(run_dir: Path, state: dict[str, Any]) -> str | None:
    """Why the records `state` relies on are not intact (event files, buffer chunks), or None."""
    from sacbench.training.replay import chunk_problem  # torch: see inspect()

    problem = _event_files_problem(run_dir, state)
    if problem is not None or state.get("finished"):
        return problem
    for name in state["buffer"]["chunks"]:
        problem = chunk_problem(run_dir / CHECKPOINT_DIR / name)
        if problem is not None:
            return problem
    return None


def inspect(run_dir: Path) -> Records:
    """Read and check every record a session relies on; change nothing."""
    # Imported where a checkpoint is read: torch comes with it (about a second of a process's
    # start), which the command wrapper and `python -m sacbench.status` (through
    # sacbench.pipeline.external) never need.
    from sacbench.training.checkpoint import load_state

    check_record_kinds(run_dir)
    metadata, problem = read_metadata(run_dir / METADATA_FILE)
    records = Records(metadata=metadata, metadata_problem=problem)
    checkpoint_dir = run_dir / CHECKPOINT_DIR
    for path in (checkpoint_dir / STATE_FILE, checkpoint_dir / PREVIOUS_STATE_FILE):
        if not path.exists():
            continue
        try:
            state = load_state(path)
        except RunDirError as error:
            records.passed_over[path] = str(error)
            continue
        problem = checkpoint_problem(run_dir, state)
        if problem is None:
            records.checkpoint, records.checkpoint_file = state, path
            return records
        records.passed_over[path] = problem
        if state.get("finished"):  # a final state is the run's last word: nothing older counts
            records.finished_problem = problem
            return records
    return records


def unverifiable(run_dir: Path, records: Records) -> str | None:
    """Why the run dir's contents cannot be attributed to a sacbench run whose settings are
    known (so that nothing may be trained into it or deleted from it), or None."""
    if records.recorded_run_args() is not None:
        return None
    metadata = run_dir / METADATA_FILE
    if records.checkpoint is not None:
        return (
            f"{metadata} is {records.metadata_problem}, and {records.checkpoint_file} (written "
            "by an older sacbench) does not record the run's settings, so which run this is "
            f"cannot be checked. Restore {metadata.name}, or move {run_dir} away to train "
            "afresh; nothing was changed"
        )
    if records.metadata_problem != "missing" or records.passed_over:
        reasons = "".join(f"; {path}: {why}" for path, why in records.passed_over.items())
        return (
            f"{metadata} is {records.metadata_problem}, and no usable checkpoint records the "
            f"run's settings to rebuild it from{reasons}. Restore {metadata.name}, or move "
            f"{run_dir} away to train afresh; nothing was changed"
        )
    unknown = [path.name for path in event_files(run_dir)]
    unknown += [name for name in (COMPLETE_FILE,) if (run_dir / name).exists()]
    if unknown:
        return (
            f"{run_dir} holds {', '.join(sorted(unknown))} but no {metadata.name}: sacbench did "
            "not make this folder (or its record is lost), and it deletes nothing it did not "
            "make. Use another --run-dir, or move those files away; nothing was changed"
        )
    return None

"""A run directory: metadata, checkpoints, the event log and the completion record.

Layout (docs/contracts.md):
    metadata.json            args, versions, host, one entry per training session
    events.out.tfevents.*    one file per session; on resume the older files are cut back to the
                             byte offset the checkpoint recorded, so no step is logged twice
    checkpoint/state.pt      everything but the replay buffer
    checkpoint/state.prev.pt the checkpoint before it, resumed from when state.pt or a record
                             only it relies on is damaged
    checkpoint/rows-*.npz    the replay buffer, in chunks added between checkpoints
    complete.json            written once the last step is done; the pipeline's output
    .sacbench.lock           held by the one process training the run (sacbench.run_lock)

A finished run also keeps its final state in checkpoint/state.pt (networks, optimizers, final
event offsets, the completion record, no replay buffer). That, not complete.json, is the proof
that the run finished: when complete.json is removed (Snakemake removes it before it reruns a
job, a user may delete it), the trainer restores it from there instead of training again.

Before a session changes anything, every record it relies on is read and checked
(sacbench.training.run_records): a run is resumed or completed from intact records only,
repaired from what is intact (the checkpoint before a damaged one; metadata.json rebuilt from
the run-defining args every checkpoint records), or refused with a message naming the file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from sacbench import private_api
from sacbench.atomic import DeviceFullError, write_json_atomically
from sacbench.provenance import host_facts, package_versions, sacbench_version, utc_now
from sacbench.run_lock import RunDirLock
from sacbench.tags import ELAPSED_TAG, EVENT_FILE_MARKER
from sacbench.training.checkpoint import load_state, write_state
from sacbench.training.errors import RunDirError
from sacbench.training.replay import ReplayBuffer
from sacbench.training.run_records import (
    CHECKPOINT_DIR,
    COMPLETE_FILE,
    METADATA_FILE,
    PREVIOUS_STATE_FILE,
    STATE_FILE,
    Records,
    inspect,
    read_metadata,
    remove_stray_temporaries,
    unverifiable,
)

# Where `finish` can be interrupted; tests make the trainer SIGKILL itself at each of them.
KILL_POINTS = (
    "before-final-state",
    "after-final-state",
    "after-buffer-removed",
    "after-complete-record",
)
KILL_POINT_VARIABLE = "SACBENCH_TEST_KILL_AT"


def kill_point(name: str) -> None:
    """Die here, as a killed job would, when the tests ask for it; otherwise nothing."""
    if os.environ.get(KILL_POINT_VARIABLE) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def describe_differences(differing: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(
        f"{key}: recorded {old!r}, asked {new!r}" for key, (old, new) in sorted(differing.items())
    )


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.metadata_path = path / METADATA_FILE
        self.complete_path = path / COMPLETE_FILE
        self.checkpoint_dir = path / CHECKPOINT_DIR
        self.state_path = self.checkpoint_dir / STATE_FILE
        self.previous_state_path = self.checkpoint_dir / PREVIOUS_STATE_FILE
        # The run dir's lock while this process holds it (hold_run_dir), so that it follows the
        # run dir when --overwrite moves the old one aside.
        self.lock: RunDirLock | None = None
        # The run-defining args this session trains (prepare); every checkpoint records them,
        # so that a run whose metadata.json is lost can still be told apart from another.
        self.run_args: dict[str, Any] | None = None
        self._records: Records | None = None
        self._buffer_cache: dict[str, Any] | None = None

    # ---- what the run dir holds ----------------------------------------------------------------

    def records(self) -> Records:
        """Every record a session relies on, read and checked once (run_records.inspect);
        RunDirError when the contents cannot be attributed to a known run."""
        if self._records is None:
            records = inspect(self.path) if self.path.is_dir() else Records(None, "missing")
            problem = unverifiable(self.path, records) if self.path.is_dir() else None
            if problem is not None:
                raise RunDirError(problem)
            self._records = records
        return self._records

    def resume_step(self) -> int:
        """The step a session here starts from: the usable checkpoint's, else 0."""
        checkpoint = self.records().checkpoint
        return 0 if checkpoint is None or checkpoint.get("finished") else checkpoint["global_step"]

    def final_state(self) -> dict[str, Any]:
        """A finished run's final state (networks, completion record); {} when it has none."""
        checkpoint = self.records().checkpoint
        return checkpoint if checkpoint is not None and checkpoint.get("finished") else {}

    # ---- lifecycle -----------------------------------------------------------------------------

    def is_complete(self) -> bool:
        return self.complete_path.exists()

    def prepare(self, run_args: dict[str, Any], *, overwrite: bool) -> dict[str, Any] | None:
        """Make the directory ready for this run; return the checkpoint to resume from, if any.

        A directory holding other args is never deleted: with overwrite it is moved aside to
        <run_dir>.replaced-<UTC time>. Damaged records are set aside (renamed, never deleted)
        or rebuilt from what is intact, each with a warning; a run that cannot be resumed as it
        stands is refused before anything changes.
        """
        differing = self.differing_args(run_args)
        if differing:
            if not overwrite:
                raise RunDirError(
                    f"{self.metadata_path} holds a run with different args "
                    f"({describe_differences(differing)}); "
                    "use another --run-dir, or --overwrite to move this one aside"
                )
            self._move_aside()
        self.path.mkdir(parents=True, exist_ok=True)
        self.run_args = dict(run_args)
        records = self.records()
        if records.checkpoint is not None:
            self._set_aside_passed_over_checkpoints()
            self._repair_metadata()
            return records.checkpoint
        if records.passed_over:
            raise RunDirError(
                "no checkpoint of this run can be resumed from (nothing was changed):\n"
                + "\n".join(f"  - {path}: {why}" for path, why in records.passed_over.items())
            )
        # Events from a session that never checkpointed would duplicate the steps we redo.
        for stale in self.event_files():
            stale.unlink()
        return None

    def differing_args(self, run_args: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """{name: (recorded, asked)} for every run-defining arg the run dir records otherwise
        (in metadata.json, or, when that is lost, in its checkpoint)."""
        recorded_args = self.records().recorded_run_args()
        if recorded_args is None:
            return {}
        from sacbench.sac.args import recorded_run_args

        recorded = recorded_run_args(recorded_args)
        return {
            key: (recorded.get(key, "<missing>"), value)
            for key, value in run_args.items()
            if recorded.get(key, "<missing>") != value
        }

    def _move_aside(self) -> None:
        # Snakemake removes complete.json before it reruns a job: put it back, so the moved run
        # still says that it finished.
        final = self.final_state()
        if not self.is_complete() and final:
            write_json_atomically(self.complete_path, final["completion"])
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        destination = self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        self.path.rename(destination)
        self.path.mkdir()
        self._records, self._buffer_cache = None, None
        if self.lock is not None:  # the lock file moved with the old run dir: lock the new one
            self.lock.moved(destination)
        print(f"moved the previous contents of {self.path} to {destination}")

    def _read_metadata(self) -> dict[str, Any]:
        metadata, problem = read_metadata(self.metadata_path)
        if metadata is None:
            raise RunDirError(f"{self.metadata_path} is {problem}")
        return metadata

    # ---- repairs -------------------------------------------------------------------------------

    def _set_aside(self, path: Path, why: str) -> Path:
        """Rename a damaged record to <name>.damaged-<UTC time> (never deleted); warn why."""
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        destination = path.with_name(f"{path.name}.damaged-{stamp}")
        path.rename(destination)
        warn(f"{why}; moved it to {destination.name}")
        return destination

    def _set_aside_passed_over_checkpoints(self) -> None:
        """Resuming from the checkpoint before the newest: the newest, unusable, is set aside,
        and the one resumed from becomes checkpoint/state.pt."""
        records = self.records()
        for path, why in records.passed_over.items():
            if path.exists():
                self._set_aside(path, f"cannot resume from {path}: {why}")
        if records.checkpoint_file == self.previous_state_path:
            os.replace(self.previous_state_path, self.state_path)
            records.checkpoint_file = self.state_path
            warn(
                f"resuming from the checkpoint before it, at step "
                f"{records.checkpoint['global_step']}: the steps after it are trained again"
            )

    def _repair_metadata(self, completion: dict[str, Any] | None = None) -> None:
        """A lost or damaged metadata.json is rebuilt from the run-defining args the checkpoint
        records (the damaged file is kept beside it); its earlier sessions are not known."""
        records = self.records()
        if records.metadata is not None:
            return
        assert records.checkpoint is not None  # records() refuses a run dir without either
        why = f"{self.metadata_path} is {records.metadata_problem}"
        if self.metadata_path.exists():
            self._set_aside(self.metadata_path, why)
        metadata: dict[str, Any] = {
            "args": dict(records.checkpoint["run_args"]),
            "sessions": [],
            "recovered": {
                "at": utc_now(),
                "from": str(records.checkpoint_file.relative_to(self.path)),
                "because": why,
            },
        }
        if completion is not None:
            metadata.update(ended_at=completion.get("finished_at"), exit_status="completed")
        write_json_atomically(self.metadata_path, metadata)
        records.metadata, records.metadata_problem = metadata, None
        warn(f"rebuilt {self.metadata_path} from {records.checkpoint_file} (earlier sessions lost)")

    def _complete_record_intact(self, record: dict[str, Any]) -> bool:
        try:
            written = json.loads(self.complete_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        return isinstance(written, dict) and written.get("global_step") == record["global_step"]

    # ---- sessions ------------------------------------------------------------------------------

    def begin_session(
        self, *, args: Any, device: str, start_step: int, update: dict[str, Any] | None = None
    ) -> None:
        """Record a session's start; `update`: which update it runs
        (sacbench.sac.learners.update_record), in the session's record and, as the latest
        session's, in the run's."""
        metadata = self._read_metadata() if self.metadata_path.exists() else {}
        from sacbench.sac.args import run_defining_args

        session = {
            "started_at": utc_now(),
            "ended_at": None,
            "start_step": start_step,
            "end_step": None,
            "exit_status": "running",
            "session_args": {
                key: value
                for key, value in vars(args).items()
                if key not in run_defining_args(args)
            },
            "host": host_facts(device=device, torch_threads=torch.get_num_threads()),
        }
        if update is not None:
            session["update"] = update
            metadata["update"] = update
        metadata.update(
            args=dict(vars(args)) | run_defining_args(args),
            sacbench=sacbench_version(),
            versions=package_versions(),
            host=session["host"],
        )
        metadata.setdefault("started_at", session["started_at"])
        metadata["ended_at"] = None
        metadata["exit_status"] = "running"
        metadata.setdefault("sessions", []).append(session)
        write_json_atomically(self.metadata_path, metadata)

    def end_session(self, *, exit_status: str, end_step: int | None) -> None:
        metadata = self._read_metadata()
        session = metadata["sessions"][-1]
        session.update(ended_at=utc_now(), end_step=end_step, exit_status=exit_status)
        metadata.update(ended_at=session["ended_at"], exit_status=exit_status)
        write_json_atomically(self.metadata_path, metadata)

    def end_session_after_error(self, error: BaseException) -> None:
        """Record a session that raised `error`, best effort: a full disk must not replace the
        error being reported with one of its own."""
        try:
            self.end_session(exit_status=f"error: {type(error).__name__}: {error}", end_step=None)
        except (OSError, RunDirError) as failure:
            warn(f"could not record the failure in {self.metadata_path}: {failure}")

    def finish(
        self,
        final_state: dict[str, Any],
        *,
        global_step: int,
        elapsed_seconds: float,
        eval_seconds: float = 0.0,
    ):
        """Record a finished run, in an order that survives a kill at any point.

        1. the final state (with the completion record) replaces the last checkpoint; from here
           on the run counts as finished;
        2. the checkpoint before it and the replay buffer chunks go (only a resume needs them);
        3. complete.json, the pipeline's output, is written.
        A kill before 1 resumes from the last periodic checkpoint; a kill after it leaves a run
        that `restore_completion` completes without training.
        """
        record = {
            "global_step": global_step,
            "elapsed_seconds": elapsed_seconds,
            "eval_seconds": eval_seconds,
            "finished_at": utc_now(),
        }
        final_state.update(
            finished=True,
            completion=record,
            global_step=global_step,
            elapsed_seconds=elapsed_seconds,
            event_files=self.record_event_offsets(
                [{"name": path.name} for path in self.event_files()]
            ),
            buffer={"added": final_state.get("buffer", {}).get("added", 0), "chunks": []},
        )
        kill_point("before-final-state")
        self._write_state(final_state, keep_previous=False)
        kill_point("after-final-state")
        self.previous_state_path.unlink(missing_ok=True)
        self._remove_buffer_chunks(keep=())
        kill_point("after-buffer-removed")
        write_json_atomically(self.complete_path, record)
        kill_point("after-complete-record")

    def finished_record(self, *, total_timesteps: int) -> dict[str, Any] | None:
        """The completion record of a run that finished all `total_timesteps`, else None.

        The final state's (checked against the event files it records); for a run without a
        usable final state, the one its metadata and events give (_record_of_older_finished_run).
        A complete.json that neither confirms is refused.
        """
        records = self.records()
        final = self.final_state()
        if final:
            return dict(final["completion"]) if final["global_step"] == total_timesteps else None
        if records.finished_problem is not None:
            raise RunDirError(
                f"the run in {self.path} finished, but its history is damaged: "
                f"{records.finished_problem}. Nothing was changed; move {self.path} away to "
                "train it afresh"
            )
        record = None
        if records.checkpoint is None:
            record = self._record_of_older_finished_run(total_timesteps=total_timesteps)
        if record is not None and records.passed_over:
            warn(
                "the run finished, but its final state cannot be used ("
                + "; ".join(records.passed_over.values())
                + f"): its completion record is rebuilt from {self.metadata_path.name} and the "
                "events, which are intact"
            )
        if record is None and self.is_complete():
            raise RunDirError(
                f"{self.complete_path} says the run finished, but neither its checkpoint nor "
                f"{self.metadata_path.name} does: move {self.complete_path.name} away to "
                "resume the run; nothing was changed"
            )
        return record

    def _record_of_older_finished_run(self, *, total_timesteps: int) -> dict[str, Any] | None:
        """Run dirs finished without a usable final state (sacbench 0.1.0's, before the final
        state existed; or one whose final state was lost): their metadata says the last session
        completed every step, and the record is rebuilt from it and the events (the final
        charts/elapsed_seconds, logged at the last step), which are read whole and checked."""
        metadata = self.records().metadata
        sessions = (metadata or {}).get("sessions") or [{}]
        last = sessions[-1]
        if last.get("exit_status") != "completed" or last.get("end_step") != total_timesteps:
            return None
        from sacbench.events import EventLogError, read_run_scalars  # only for this rare repair

        try:
            scalars = read_run_scalars(self.path)
        except EventLogError as error:
            raise RunDirError(f"the finished run's history is damaged: {error}") from None
        elapsed = scalars[scalars["tag"] == ELAPSED_TAG].sort_values("step")
        if elapsed.empty or int(elapsed["step"].iloc[-1]) != total_timesteps - 1:
            return None
        return {
            "global_step": total_timesteps,
            "elapsed_seconds": float(elapsed["value"].iloc[-1]),
            "finished_at": last["ended_at"],
        }

    def restore_completion(self, record: dict[str, Any]) -> None:
        """Finish what a kill during `finish` left undone, and repair a finished run's lost or
        damaged records from its final state; trains nothing.

        complete.json is written last, and rewritten whenever metadata.json changed here, so
        that its newer time tells Snakemake to extract the run again."""
        rebuilt = bool(self.final_state()) and self.records().metadata is None
        if rebuilt:
            self._repair_metadata(completion=record)
        self.previous_state_path.unlink(missing_ok=True)
        self._remove_buffer_chunks(keep=())
        metadata = self._read_metadata() if self.metadata_path.exists() else {}
        sessions = metadata.get("sessions") or []
        ended = bool(sessions) and sessions[-1].get("exit_status") == "running"
        if ended:
            self.end_session(exit_status="completed", end_step=record["global_step"])
        intact = self.is_complete() and self._complete_record_intact(record)
        if self.is_complete() and not intact:
            self._set_aside(self.complete_path, f"{self.complete_path} is damaged")
        if not intact or rebuilt or ended:
            written = json.loads(self.complete_path.read_text()) if intact else record
            write_json_atomically(self.complete_path, written)

    def _remove_buffer_chunks(self, *, keep: Collection[str]) -> None:
        for chunk in self.checkpoint_dir.glob("rows-*.npz"):
            if chunk.name not in keep:
                chunk.unlink()

    # ---- event files ---------------------------------------------------------------------------

    def event_files(self) -> list[Path]:
        return sorted(path for path in self.path.glob(f"*{EVENT_FILE_MARKER}*") if path.is_file())

    def open_writer(self) -> tuple[SummaryWriter, str]:
        """A new event file, named after every existing one (names start with the Unix second)."""
        existing = self.event_files()
        if existing and existing[-1].name.split(".")[3] >= str(int(time.time())):
            time.sleep(1.05)
        writer = SummaryWriter(str(self.path))
        return writer, private_api.event_file_path(writer).name

    def record_event_offsets(self, event_files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Sizes of the session's event files after a flush, so a resume can cut what follows."""
        recorded = []
        for entry in event_files:
            path = self.path / entry["name"]
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
            recorded.append({"name": entry["name"], "size": path.stat().st_size})
        return recorded

    def trim_event_files(self, event_files: list[dict[str, Any]]) -> None:
        """Cut each file back to its checkpointed size; drop files the checkpoint never saw."""
        sizes = {entry["name"]: entry["size"] for entry in event_files}
        for path in self.event_files():
            if path.name not in sizes:
                path.unlink()
            elif path.stat().st_size > sizes[path.name]:
                os.truncate(path, sizes[path.name])
            elif path.stat().st_size < sizes[path.name]:
                raise RunDirError(
                    f"{path} is shorter ({path.stat().st_size} bytes) than its checkpoint "
                    f"recorded ({sizes[path.name]} bytes): steps would be missing"
                )

    # ---- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, state: dict[str, Any], *, buffer: ReplayBuffer) -> None:
        """Atomically: buffer chunk first, then state.pt (write, fsync, rename; the checkpoint
        it replaces is kept as state.prev.pt, with the chunks it needs), then cleanup.

        A full device stops the run with a RunDirError naming the file; the last good
        checkpoint stays as it was."""
        previous = self._buffer_record()
        try:
            new_chunk = buffer.save_new_rows(self.checkpoint_dir, saved_until=previous["added"])
            chunks = buffer.live_chunks(previous["chunks"] + ([new_chunk] if new_chunk else []))
            state["buffer"] = {"added": buffer.added, "chunks": chunks}
            self._write_state(state, keep_previous=True)
        except DeviceFullError as error:
            raise RunDirError(
                f"{error}. The checkpoint at step {state.get('global_step')} was not written; "
                f"the last good one, {self.state_path}, is kept: free space there and run this "
                "again to resume from it"
            ) from error
        self._remove_buffer_chunks(keep={*chunks, *previous["chunks"]})

    def _write_state(self, state: dict[str, Any], *, keep_previous: bool) -> None:
        if self.run_args is not None:
            state.setdefault("run_args", self.run_args)
        previous = self.previous_state_path if keep_previous else None
        write_state(self.state_path, state, previous=previous)
        self._buffer_cache = state["buffer"]

    def _buffer_record(self) -> dict[str, Any]:
        if self._buffer_cache is not None:
            return self._buffer_cache
        if self.state_path.exists():
            return self.load_checkpoint()["buffer"]
        return {"added": 0, "chunks": []}

    def load_checkpoint(self) -> dict[str, Any]:
        state = load_state(self.state_path)
        self._buffer_cache = state["buffer"]
        return state

    def load_buffer(self, buffer: ReplayBuffer, checkpoint: dict[str, Any]) -> None:
        record = checkpoint["buffer"]
        buffer.load_chunks(self.checkpoint_dir, record["chunks"], added=record["added"])
        self._buffer_cache = record


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def hold_run_dir(path: Path, *, program: str) -> Iterator[RunDir]:
    """The run dir at `path`, locked for this process until the block ends (sacbench.run_lock):
    taken before anything in it changes; a second process is refused, naming this one. The
    temporary files that a killed write left are removed first."""
    lock = RunDirLock(path, program=program)
    lock.acquire()
    if lock.taken_over_from:
        warn(f"took {lock.path} over from {lock.taken_over_from}")
    try:
        run_dir = RunDir(path)
        run_dir.lock = lock
        for stray in remove_stray_temporaries(path):
            warn(f"removed {stray}, left by a write that was interrupted")
        yield run_dir
    finally:
        lock.release()

"""A run directory: metadata, checkpoints, the event log and the completion record.

Layout (docs/contracts.md):
    metadata.json         args, versions, host, one entry per training session
    events.out.tfevents.* one file per session; on resume the older files are cut back to the
                          byte offset the checkpoint recorded, so no step is logged twice
    checkpoint/state.pt   everything but the replay buffer
    checkpoint/rows-*.npz the replay buffer, in chunks added between checkpoints
    complete.json         written once the last step is done; the pipeline's output

A finished run also keeps its final state in checkpoint/state.pt (networks, optimizers, final
event offsets, the completion record, no replay buffer). That, not complete.json, is the proof
that the run finished: when complete.json is removed (Snakemake removes it before it reruns a
job, a user may delete it), the trainer restores it from there instead of training again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from sacbench import private_api
from sacbench.atomic import write_json_atomically
from sacbench.provenance import host_facts, package_versions, sacbench_version, utc_now
from sacbench.tags import ELAPSED_TAG, EVENT_FILE_MARKER
from sacbench.training.checkpoint import load_state, write_state
from sacbench.training.errors import RunDirError
from sacbench.training.replay import ReplayBuffer

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
        self.metadata_path = path / "metadata.json"
        self.complete_path = path / "complete.json"
        self.checkpoint_dir = path / "checkpoint"
        self.state_path = self.checkpoint_dir / "state.pt"

    # ---- lifecycle -----------------------------------------------------------------------------

    def is_complete(self) -> bool:
        return self.complete_path.exists()

    def prepare(self, run_args: dict[str, Any], *, overwrite: bool) -> dict[str, Any] | None:
        """Make the directory ready for this run; return the checkpoint to resume from, if any.

        A directory holding other args is never deleted: with overwrite it is moved aside to
        <run_dir>.replaced-<UTC time>.
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
        if self.state_path.exists():
            return self.load_checkpoint()
        # Events from a session that never checkpointed would duplicate the steps we redo.
        for stale in self.event_files():
            stale.unlink()
        return None

    def differing_args(self, run_args: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """{name: (recorded, asked)} for every run-defining arg the metadata records otherwise."""
        if not self.metadata_path.exists():
            return {}
        from sacbench.sac.args import recorded_run_args

        recorded = recorded_run_args(self._read_metadata().get("args", {}))
        return {
            key: (recorded.get(key, "<missing>"), value)
            for key, value in run_args.items()
            if recorded.get(key, "<missing>") != value
        }

    def _move_aside(self) -> None:
        # Snakemake removes complete.json before it reruns a job: put it back, so the moved run
        # still says that it finished.
        if not self.is_complete() and self.state_path.exists():
            state = self.load_checkpoint()
            if state.get("finished"):
                write_json_atomically(self.complete_path, state["completion"])
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        destination = self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        self.path.rename(destination)
        print(f"moved the previous contents of {self.path} to {destination}")

    def _read_metadata(self) -> dict[str, Any]:
        try:
            return json.loads(self.metadata_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise RunDirError(f"{self.metadata_path} is unreadable: {error}") from error

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
        2. the replay buffer chunks go (only a resume needs them);
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
        self._write_state(final_state)
        kill_point("after-final-state")
        self._remove_buffer_chunks(keep=())
        kill_point("after-buffer-removed")
        write_json_atomically(self.complete_path, record)
        kill_point("after-complete-record")

    def finished_record(self, *, total_timesteps: int) -> dict[str, Any] | None:
        """The completion record of a run that finished all `total_timesteps`, else None.

        complete.json when present; otherwise the one kept in the final state.
        """
        if self.complete_path.exists():
            try:
                return json.loads(self.complete_path.read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise RunDirError(f"{self.complete_path} is unreadable: {error}") from error
        if not self.state_path.exists():
            return None
        state = self.load_checkpoint()
        if state.get("finished") and state["global_step"] == total_timesteps:
            return dict(state["completion"])
        return self._record_of_older_finished_run(total_timesteps=total_timesteps)

    def _record_of_older_finished_run(self, *, total_timesteps: int) -> dict[str, Any] | None:
        """Run dirs finished by sacbench 0.1.0 before the final state existed: their metadata
        says the last session completed every step, and their last checkpoint's buffer chunks
        are gone, so they cannot resume. The record is rebuilt from the metadata and the
        events (the final charts/elapsed_seconds, logged at the last step)."""
        sessions = self._read_metadata().get("sessions") or [{}]
        last = sessions[-1]
        if last.get("exit_status") != "completed" or last.get("end_step") != total_timesteps:
            return None
        from sacbench.events import read_run_scalars  # only for this rare repair

        scalars = read_run_scalars(self.path)
        elapsed = scalars[scalars["tag"] == ELAPSED_TAG].sort_values("step")
        if elapsed.empty or int(elapsed["step"].iloc[-1]) != total_timesteps - 1:
            return None
        return {
            "global_step": total_timesteps,
            "elapsed_seconds": float(elapsed["value"].iloc[-1]),
            "finished_at": last["ended_at"],
        }

    def restore_completion(self, record: dict[str, Any]) -> None:
        """Finish what a kill during `finish` left undone; trains nothing."""
        self._remove_buffer_chunks(keep=())
        if not self.complete_path.exists():
            write_json_atomically(self.complete_path, record)
        metadata = self._read_metadata() if self.metadata_path.exists() else {}
        sessions = metadata.get("sessions") or []
        if sessions and sessions[-1].get("exit_status") == "running":
            self.end_session(exit_status="completed", end_step=record["global_step"])

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
        """Atomically: buffer chunk first, then state.pt (write, fsync, rename), then cleanup."""
        previous = self._buffer_record()
        new_chunk = buffer.save_new_rows(self.checkpoint_dir, saved_until=previous["added"])
        chunks = buffer.live_chunks(previous["chunks"] + ([new_chunk] if new_chunk else []))
        state["buffer"] = {"added": buffer.added, "chunks": chunks}
        self._write_state(state)
        self._remove_buffer_chunks(keep=chunks)

    def _write_state(self, state: dict[str, Any]) -> None:
        write_state(self.state_path, state)
        self._buffer_cache = state["buffer"]

    def _buffer_record(self) -> dict[str, Any]:
        cached = getattr(self, "_buffer_cache", None)
        if cached is not None:
            return cached
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

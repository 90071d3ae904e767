"""Read a run directory's TensorBoard event files into one tidy table of scalars.

The table has one row per logged scalar: ``tag`` (str), ``step`` (int64), ``wall_time`` (float64,
seconds since the epoch, as the writer stamped it) and ``value`` (float64 holding the float32 the
writer stored), sorted by tag, then step.

Two readers give the same table:

* ``"records"`` (default): walks the TFRecord framing itself, verifies every masked CRC-32C, and
  decodes each record with TensorBoard's own ``Event`` protobuf class. Fast enough for a 1M-step
  run (docs/performance.md, "Memory and I/O").
* ``"event-accumulator"``: TensorBoard's ``EventAccumulator`` (size guidance 0 = keep every
  point), several times slower because it checks CRCs in pure Python and converts every value to
  a tensor. The tests check that both readers agree.

TensorBoard's loaders stop silently at a truncated or corrupt record; both readers here first
verify the file's framing and checksums and raise :class:`EventLogError` naming the file and
the byte offset instead, so a damaged file can never yield a silently shortened table.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import google_crc32c
import numpy as np
from tensorboard.compat.proto import event_pb2

from sacbench.tags import EVAL_EPISODE_TAGS, EVENT_FILE_MARKER

if TYPE_CHECKING:
    import pandas as pd

Reader = Literal["records", "event-accumulator"]
READERS: tuple[str, ...] = ("records", "event-accumulator")
SCALAR_COLUMNS: tuple[str, ...] = ("tag", "step", "wall_time", "value")

_HEADER = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


class EventLogError(ValueError):
    """A run's event log that cannot be read completely or consistently: a damaged or missing
    event file, or a run dir whose files do not form one history. The message names the file
    or the run dir."""


# Inside a run dir of an external command (docs/contracts.md): where the earlier attempts of
# the run are kept, never read back, and where W&B's TensorBoard sync keeps copies of the same
# event files. Neither is part of the run's history.
PREVIOUS_ATTEMPTS_DIR = "attempts"
WANDB_DIR = "wandb"
_NOT_HISTORY = frozenset({PREVIOUS_ATTEMPTS_DIR, WANDB_DIR})


def event_files(run_dir: Path | str) -> list[Path]:
    """The event files directly inside ``run_dir`` in name order (other files are ignored)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise EventLogError(f"run dir {run_dir} does not exist or is not a directory")
    return sorted(
        path for path in run_dir.iterdir() if EVENT_FILE_MARKER in path.name and path.is_file()
    )


def run_event_files(run_dir: Path | str) -> list[Path]:
    """The event files that hold a run's history, in path order.

    sacbench's trainer writes them directly into the run dir. An external command writes them
    where it likes below its working directory, the run dir (CleanRL: runs/{run_name}/), so when
    none lie directly inside, every folder below is searched except attempts/ (earlier attempts),
    wandb/ (W&B's copies) and hidden folders.
    """
    run_dir = Path(run_dir)
    direct = event_files(run_dir)
    if direct:
        return direct
    found: list[Path] = []
    for folder, subfolders, names in os.walk(run_dir):
        top = Path(folder) == run_dir
        subfolders[:] = sorted(
            name
            for name in subfolders
            if not name.startswith(".") and not (top and name in _NOT_HISTORY)
        )
        found += [Path(folder) / name for name in names if EVENT_FILE_MARKER in name]
    return sorted(found)


def iter_records(path: Path | str) -> Iterator[bytes]:
    """The payloads of a TFRecord file, each checked against its length and data checksums."""
    path = Path(path)
    return _records_in(path, path.read_bytes())


def check_event_file_prefix(path: Path | str, size: int) -> None:
    """Check that the first `size` bytes of the event file at `path` are whole records with valid
    checksums (what a checkpoint recorded of it); EventLogError naming the file otherwise."""
    path = Path(path)
    if not path.is_file():
        raise EventLogError(f"{path}: no such event file")
    with open(path, "rb") as handle:
        data = handle.read(size)
    if len(data) < size:
        raise EventLogError(f"{path}: {len(data)} bytes, shorter than the {size} recorded")
    if size:
        for index, payload in enumerate(_records_in(path, data)):
            if index == 0:
                _check_first_event(path, payload)


def _records_in(path: Path, data: bytes) -> Iterator[bytes]:
    size = len(data)
    if size == 0:
        raise EventLogError(f"{path}: zero-byte event file (the writer never flushed)")
    # Local names: this loop runs once per logged point (~10^5 times for a 1M-step run).
    unpack_length, unpack_crc, crc32c = _HEADER.unpack_from, _CRC.unpack_from, google_crc32c.value
    offset = 0
    while offset < size:
        if size - offset < 12:
            raise EventLogError(
                f"{path}: truncated record header at byte {offset} (file has {size} bytes)"
            )
        header = data[offset : offset + 8]
        crc = crc32c(header)
        stored = unpack_crc(data, offset + 8)[0]
        if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != stored:
            if offset == 0:
                raise EventLogError(
                    f"{path}: not a TensorBoard event file (no valid record header at byte 0)"
                )
            raise EventLogError(f"{path}: corrupt record header at byte {offset}")
        (length,) = unpack_length(header)
        end = offset + 12 + length + 4
        if end > size:
            raise EventLogError(
                f"{path}: truncated record at byte {offset} (needs {end} bytes, file has {size})"
            )
        payload = data[offset + 12 : end - 4]
        crc = crc32c(payload)
        stored = unpack_crc(data, end - 4)[0]
        if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != stored:
            raise EventLogError(f"{path}: corrupt record at byte {offset} (checksum mismatch)")
        yield payload
        offset = end


def _check_first_event(path: Path, first_payload: bytes | None) -> None:
    if first_payload is None:
        return
    try:
        first = event_pb2.Event.FromString(first_payload)
    except Exception as error:  # protobuf raises its own DecodeError type
        raise EventLogError(f"{path}: first record is not a TensorBoard Event ({error})") from None
    if not first.file_version.startswith("brain.Event:"):
        raise EventLogError(
            f"{path}: not a TensorBoard event file (first record carries no file_version)"
        )


def _frame(
    tags: list[str], steps: list[int], wall_times: list[float], values: list[float]
) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: the trainer imports this module, never pandas

    return pd.DataFrame(
        {
            "tag": pd.Series(tags, dtype=object),
            "step": np.asarray(steps, dtype=np.int64),
            "wall_time": np.asarray(wall_times, dtype=np.float64),
            "value": np.asarray(values, dtype=np.float64),
        }
    )


def _scalars_by_records(path: Path) -> pd.DataFrame:
    from tensorboard.util import tensor_util

    tags: list[str] = []
    steps: list[int] = []
    wall_times: list[float] = []
    values: list[float] = []
    first: bytes | None = None
    parse = event_pb2.Event.FromString
    for payload in iter_records(path):
        if first is None:
            first = payload
            _check_first_event(path, first)
        try:
            event = parse(payload)
        except Exception as error:
            raise EventLogError(f"{path}: undecodable event record ({error})") from None
        if not event.HasField("summary"):
            continue
        for summary_value in event.summary.value:
            kind = summary_value.WhichOneof("value")
            if kind == "simple_value":
                value = summary_value.simple_value
            elif (
                kind == "tensor" and summary_value.metadata.plugin_data.plugin_name == "scalars"
            ):  # the writer's new_style scalars
                value = float(tensor_util.make_ndarray(summary_value.tensor).item())
            else:
                continue
            tags.append(summary_value.tag)
            steps.append(event.step)
            wall_times.append(event.wall_time)
            values.append(value)
    return _frame(tags, steps, wall_times, values)


def _scalars_by_event_accumulator(path: Path) -> pd.DataFrame:
    from tensorboard.backend.event_processing import event_accumulator

    # TensorBoard's loader skips damaged records silently, so verify the file first.
    first = next(iter_records(path), None)
    _check_first_event(path, first)
    for _ in iter_records(path):
        pass
    accumulator = event_accumulator.EventAccumulator(
        str(path),
        size_guidance={event_accumulator.SCALARS: 0},
        # A run's files hold each step once; purging would hide the duplicates we reject.
        purge_orphaned_data=False,
    )
    accumulator.Reload()
    tags: list[str] = []
    steps: list[int] = []
    wall_times: list[float] = []
    values: list[float] = []
    for tag in accumulator.Tags()["scalars"]:
        for scalar in accumulator.Scalars(tag):
            tags.append(tag)
            steps.append(scalar.step)
            wall_times.append(scalar.wall_time)
            values.append(scalar.value)
    from tensorboard.util import tensor_util

    for tag in accumulator.Tags()["tensors"]:  # the writer's new_style scalars land here
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for tensor_event in accumulator.Tensors(tag):
            tags.append(tag)
            steps.append(tensor_event.step)
            wall_times.append(tensor_event.wall_time)
            values.append(float(tensor_util.make_ndarray(tensor_event.tensor_proto).item()))
    return _frame(tags, steps, wall_times, values)


def read_event_file(path: Path | str, *, reader: Reader = "records") -> pd.DataFrame:
    """The scalars of one event file, in file order."""
    if reader not in READERS:
        raise ValueError(f"reader must be one of {READERS}, got {reader!r}")
    path = Path(path)
    if not path.is_file():
        raise EventLogError(f"{path}: no such event file")
    if reader == "records":
        return _scalars_by_records(path)
    return _scalars_by_event_accumulator(path)


def read_run_scalars(run_dir: Path | str, *, reader: Reader = "records") -> pd.DataFrame:
    """All scalars of a run dir, every event file of its history included
    (:func:`run_event_files`), sorted by (tag, step).

    A resumed run has one file per training session; the trainer truncates each older file at the
    checkpoint it resumed from, so a (tag, step) pair seen twice means the history is
    inconsistent, and that is an error naming the run dir. The evaluation episodes' tags are the
    exception: an evaluation writes one point per episode at its step, all in one file, so for
    them only a (tag, step) pair found in two files is an error.
    """
    import pandas as pd

    run_dir = Path(run_dir)
    files = run_event_files(run_dir)
    if not files:
        raise EventLogError(
            f"run dir {run_dir} holds no TensorBoard event files (*{EVENT_FILE_MARKER}*)"
        )
    frames = []
    for path in files:
        frame = read_event_file(path, reader=reader)
        frame["_file"] = str(path.relative_to(run_dir))
        frames.append(frame)
    scalars = pd.concat(frames, ignore_index=True)
    per_episode = scalars["tag"].isin(EVAL_EPISODE_TAGS)
    duplicated = scalars.duplicated(subset=["tag", "step"], keep=False) & ~per_episode
    episodes = scalars[per_episode]
    if not episodes.empty:
        files = episodes.groupby(["tag", "step"])["_file"].transform("nunique")
        duplicated[episodes.index] = files.gt(1)
    if duplicated.any():
        clash = scalars[duplicated].sort_values(["tag", "step", "_file"])
        first = clash.iloc[0]
        sources = sorted(set(clash[clash.tag.eq(first.tag) & clash.step.eq(first.step)]._file))
        raise EventLogError(
            f"run dir {run_dir}: {int(duplicated.sum())} scalar points share a (tag, step), "
            f"e.g. {first.tag} at step {first.step} in {', '.join(sources)}; a resumed run's "
            "older event file must be truncated at the checkpoint it resumed from"
        )
    scalars = scalars.drop(columns="_file").sort_values(["tag", "step"], kind="stable")
    return scalars.reset_index(drop=True)

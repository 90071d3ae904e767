"""Round trips: events written by the real SummaryWriter, read back as exact frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from synthetic_runs import SyntheticRun, write_run_dir
from torch.utils.tensorboard import SummaryWriter

from sacbench.events import (
    READERS,
    EventLogError,
    event_files,
    read_event_file,
    read_run_scalars,
)


def _frame(rows: list[tuple[str, int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tag": pd.Series([row[0] for row in rows], dtype=object),
            "step": np.asarray([row[1] for row in rows], dtype=np.int64),
            "wall_time": np.asarray([row[2] for row in rows], dtype=np.float64),
            "value": np.asarray([row[3] for row in rows], dtype=np.float64),
        }
    )


def _small_run(run_dir: Path) -> None:
    writer = SummaryWriter(str(run_dir))
    writer.add_text("hyperparameters", "|param|value|")
    writer.add_scalar("charts/episodic_return", 12.5, 149, walltime=1000.25)
    writer.add_scalar("losses/qf1_loss", 0.1, 600, walltime=1001.5)
    writer.add_scalar("charts/SPS", 97, 600, walltime=1001.5)
    writer.add_scalar("charts/episodic_return", -3.0, 299, walltime=1002.0)
    writer.add_scalar("losses/qf1_loss", 0.05, 700, walltime=1003.0, new_style=True)
    writer.close()


SMALL_RUN_FRAME = _frame(
    [
        ("charts/SPS", 600, 1001.5, 97.0),
        ("charts/episodic_return", 149, 1000.25, 12.5),
        ("charts/episodic_return", 299, 1002.0, -3.0),
        # float32 is what the writer stores: 0.1 comes back as float32(0.1).
        ("losses/qf1_loss", 600, 1001.5, float(np.float32(0.1))),
        ("losses/qf1_loss", 700, 1003.0, float(np.float32(0.05))),
    ]
)


@pytest.mark.parametrize("reader", READERS)
def test_round_trip_gives_the_exact_frame(tmp_path: Path, reader: str) -> None:
    _small_run(tmp_path)
    pdt.assert_frame_equal(read_run_scalars(tmp_path, reader=reader), SMALL_RUN_FRAME)


def test_round_trip_of_a_trainer_shaped_run(tmp_path: Path) -> None:
    run = SyntheticRun(env_id="Walker2d-v4", seed=3)
    write_run_dir(tmp_path, run)
    scalars = read_run_scalars(tmp_path)
    pdt.assert_frame_equal(scalars, run.expected_frame())
    # Spot checks against the trainer's cadence, independent of the helper's bookkeeping.
    assert scalars[scalars.tag == "charts/SPS"].step.tolist() == list(range(600, 2000, 100))
    assert scalars[scalars.tag == "charts/elapsed_seconds"].step.iloc[-1] == 1999
    assert len(scalars[scalars.tag == "charts/episodic_return"]) == 2000 // 150


def test_resumed_run_with_several_event_files(tmp_path: Path) -> None:
    run = SyntheticRun(resume_at=(800, 1500))
    write_run_dir(tmp_path, run)
    files = event_files(tmp_path)
    assert len(files) == 3
    # The older files were cut back at their checkpoints: each holds only its own session.
    first = read_event_file(files[0])
    assert first.step.max() < 800
    assert read_event_file(files[1]).step.between(800, 1499).all()
    for reader in READERS:
        pdt.assert_frame_equal(read_run_scalars(tmp_path, reader=reader), run.expected_frame())


def test_a_step_logged_twice_across_files_is_an_error_naming_the_run(tmp_path: Path) -> None:
    for walltime in (10.0, 20.0):
        writer = SummaryWriter(str(tmp_path), filename_suffix=f".{int(walltime)}")
        writer.add_scalar("charts/SPS", 100, 600, walltime=walltime)
        writer.close()
    with pytest.raises(EventLogError, match=rf"{tmp_path}.*charts/SPS at step 600"):
        read_run_scalars(tmp_path)


@pytest.mark.parametrize("reader", READERS)
def test_an_evaluations_episodes_share_a_step_and_keep_their_order(
    tmp_path: Path, reader: str
) -> None:
    # The trainer logs every episode of one evaluation at the same step, as CleanRL's tag.
    run = SyntheticRun(eval_frequency=500, eval_episodes=3, resume_at=(1200,))
    write_run_dir(tmp_path, run)
    scalars = read_run_scalars(tmp_path, reader=reader)
    pdt.assert_frame_equal(scalars, run.expected_frame())
    returns = scalars[scalars.tag == "eval/episodic_return"]
    assert returns.step.tolist() == [step for step in (500, 1000, 1500, 2000) for _ in range(3)]
    assert returns.value.tolist() == [run.eval_return(s, k) for s in (500, 1000, 1500, 2000)
                                      for k in range(3)]  # fmt: skip


def test_an_evaluation_step_found_in_two_files_is_an_error(tmp_path: Path) -> None:
    # Two sessions that both evaluated at one step: the older file was not cut back.
    for walltime in (10.0, 20.0):
        writer = SummaryWriter(str(tmp_path), filename_suffix=f".{int(walltime)}")
        for episode in range(2):
            writer.add_scalar("eval/episodic_return", episode, 1000, walltime=walltime)
        writer.close()
    with pytest.raises(EventLogError, match=rf"{tmp_path}: 4 scalar .*eval/episodic_return at "
                       "step 1000"):  # fmt: skip
        read_run_scalars(tmp_path)


def test_a_training_tag_logged_twice_in_one_file_is_still_an_error(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("charts/episodic_return", 1.0, 149, walltime=1.0)
    writer.add_scalar("charts/episodic_return", 2.0, 149, walltime=2.0)
    writer.close()
    with pytest.raises(EventLogError, match=r"charts/episodic_return at step 149"):
        read_run_scalars(tmp_path)


def test_empty_dir_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match=rf"{tmp_path} holds no TensorBoard event files"):
        read_run_scalars(tmp_path)


def test_missing_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="does not exist"):
        read_run_scalars(tmp_path / "nowhere")


def test_non_event_files_are_ignored(tmp_path: Path) -> None:
    _small_run(tmp_path)
    (tmp_path / "metadata.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not events")
    nested = tmp_path / "checkpoint"
    nested.mkdir()
    (nested / "events.out.tfevents.0.elsewhere").write_bytes(b"ignored: not at top level")
    pdt.assert_frame_equal(read_run_scalars(tmp_path), SMALL_RUN_FRAME)


def test_a_file_with_only_the_version_header_gives_an_empty_frame(tmp_path: Path) -> None:
    SummaryWriter(str(tmp_path)).close()
    scalars = read_run_scalars(tmp_path)
    assert scalars.empty
    assert list(scalars.columns) == ["tag", "step", "wall_time", "value"]


@pytest.mark.parametrize("reader", READERS)
def test_zero_byte_event_file_is_an_error_naming_it(tmp_path: Path, reader: str) -> None:
    _small_run(tmp_path)
    empty = tmp_path / "events.out.tfevents.1700000001.host.1.0"
    empty.touch()
    with pytest.raises(EventLogError, match=rf"{empty}: zero-byte"):
        read_run_scalars(tmp_path, reader=reader)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("cut", [1, 5, 13])
def test_truncated_event_file_is_an_error_naming_it(tmp_path: Path, reader: str, cut: int) -> None:
    # TensorBoard's own loader would silently stop at the damaged record.
    _small_run(tmp_path)
    (path,) = event_files(tmp_path)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(EventLogError, match=rf"{path}: truncated record"):
        read_run_scalars(tmp_path, reader=reader)


def test_corrupt_record_is_an_error_naming_it(tmp_path: Path) -> None:
    _small_run(tmp_path)
    (path,) = event_files(tmp_path)
    data = bytearray(path.read_bytes())
    data[-8] ^= 0xFF  # inside the last record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(EventLogError, match=rf"{path}: corrupt record at byte \d+"):
        read_run_scalars(tmp_path)


@pytest.mark.parametrize("reader", READERS)
def test_a_non_event_file_named_like_one_is_an_error(tmp_path: Path, reader: str) -> None:
    _small_run(tmp_path)
    impostor = tmp_path / "events.out.tfevents.backup.txt"
    impostor.write_text("these are not TFRecords, just text that happens to be long enough\n")
    with pytest.raises(EventLogError, match=rf"{impostor}: not a TensorBoard event file"):
        read_run_scalars(tmp_path, reader=reader)


def test_unknown_reader_is_rejected(tmp_path: Path) -> None:
    _small_run(tmp_path)
    with pytest.raises(ValueError, match="reader must be one of"):
        read_event_file(event_files(tmp_path)[0], reader="tfrecord")  # type: ignore[arg-type]

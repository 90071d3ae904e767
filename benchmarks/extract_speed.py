"""Extraction speed on the events of a 1M-step run (target: <= 2 s).

Writes, with the real torch SummaryWriter, what the trainer logs in 1,000,000 steps with
learning_starts 5,000: 11 tags (8 losses, charts/SPS, charts/steady_SPS, charts/elapsed_seconds)
every 100 steps (~9,950 points each) and 1,000 finished episodes (charts/episodic_return and
charts/episodic_length). Then it times both readers of sacbench.events on the same run dir and
checks that they return the same table:

    python benchmarks/extract_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas.testing as pdt
from torch.utils.tensorboard import SummaryWriter

from sacbench.events import read_run_scalars
from sacbench.tags import LOSS_TAGS, TIME_TAGS

TOTAL_STEPS = 1_000_000
LEARNING_STARTS = 5_000
EPISODE_LENGTH = 1_000
PERIODIC_TAGS = (*LOSS_TAGS, *TIME_TAGS)


def write_million_step_events(run_dir: Path) -> int:
    writer = SummaryWriter(str(run_dir))
    writer.add_text("hyperparameters", "|param|value|")
    points = 0
    for step in range(TOTAL_STEPS):
        wall_time = 1.7e9 + step / 100.0
        if (step + 1) % EPISODE_LENGTH == 0:
            writer.add_scalar("charts/episodic_return", step / 100.0, step, walltime=wall_time)
            writer.add_scalar("charts/episodic_length", EPISODE_LENGTH, step, walltime=wall_time)
            points += 2
        if step > LEARNING_STARTS and step % 100 == 0:
            for index, tag in enumerate(PERIODIC_TAGS):
                writer.add_scalar(tag, index + step * 1e-6, step, walltime=wall_time)
            points += len(PERIODIC_TAGS)
    writer.close()
    return points


def best_time(run_dir: Path, reader: str, repeats: int):
    best, table = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        table = read_run_scalars(run_dir, reader=reader)
        best = min(best, time.perf_counter() - started)
    return best, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many timings")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        run_dir = Path(directory)
        started = time.perf_counter()
        points = write_million_step_events(run_dir)
        size = sum(path.stat().st_size for path in run_dir.iterdir())
        print(f"wrote {points:,} scalar points ({size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        records_seconds, records = best_time(run_dir, "records", options.repeats)
        accumulator_seconds, accumulated = best_time(run_dir, "event-accumulator", 1)
        assert records is not None and len(records) == points
        pdt.assert_frame_equal(records, accumulated)
        verdict = "meets" if records_seconds <= 2.0 else "MISSES"
        print(f"records reader (default):       {records_seconds:.2f} s "
              f"(best of {options.repeats}; {verdict} the 2 s target)")  # fmt: skip
        print(f"TensorBoard EventAccumulator:   {accumulator_seconds:.2f} s")
        print(f"ratio accumulator / records:    {accumulator_seconds / records_seconds:.1f}x "
              "(both return the identical table)")  # fmt: skip


if __name__ == "__main__":
    main()

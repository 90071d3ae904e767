"""The run's TensorBoard event log, each tag by its name in sacbench.tags; the steady-SPS window.

The order of the scalars written is CleanRL's; readers (sacbench.events, the results) rely on the
tags only, but keeping the order keeps event files comparable with older runs byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.tensorboard import SummaryWriter

from sacbench.sac.args import Args
from sacbench.tags import (
    ELAPSED_TAG,
    EVAL_LENGTH_TAG,
    EVAL_RETURN_TAG,
    EVAL_SECONDS_TAG,
    HYPERPARAMETERS_TAG,
    LENGTH_TAG,
    RETURN_TAG,
    SPS_TAG,
    STEADY_SPS_TAG,
    loss_tag,
)


class EventLog:
    """One session's event file (RunDir.open_writer names and opens it)."""

    def __init__(self, writer: SummaryWriter, file_name: str) -> None:
        self.writer = writer
        self.file_name = file_name

    def hyperparameters(self, args: Args) -> None:
        # Only the first session writes them: a resumed run's log reads as one run.
        self.writer.add_text(
            HYPERPARAMETERS_TAG,
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{key}|{value}|" for key, value in vars(args).items()),
        )

    def episode(self, global_step: int, *, episode_return: float, episode_length: int) -> None:
        self.writer.add_scalar(RETURN_TAG, episode_return, global_step)
        self.writer.add_scalar(LENGTH_TAG, episode_length, global_step)

    def update(
        self,
        metrics: dict[str, torch.Tensor],
        global_step: int,
        *,
        elapsed: float,
        steady_sps: float,
    ) -> None:
        """A log point: the losses, SPS (CleanRL's, truncated), steady SPS and the elapsed time."""
        for name, value in metrics.items():
            self.writer.add_scalar(loss_tag(name), value.item(), global_step)
        self.writer.add_scalar(SPS_TAG, int(global_step / elapsed), global_step)
        self.writer.add_scalar(STEADY_SPS_TAG, steady_sps, global_step)
        self.writer.add_scalar(ELAPSED_TAG, elapsed, global_step)

    def evaluation(
        self, step: int, *, returns: list[float], lengths: list[int], eval_seconds: float
    ) -> None:
        """One evaluation after `step` training steps: a point per episode, then the seconds
        spent evaluating so far."""
        for episode_return, episode_length in zip(returns, lengths, strict=True):
            self.writer.add_scalar(EVAL_RETURN_TAG, episode_return, step)
            self.writer.add_scalar(EVAL_LENGTH_TAG, episode_length, step)
        self.writer.add_scalar(EVAL_SECONDS_TAG, eval_seconds, step)

    def elapsed(self, global_step: int, elapsed: float) -> None:
        self.writer.add_scalar(ELAPSED_TAG, elapsed, global_step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@dataclass
class SteadyWindow:
    """steady_SPS counts the steps done since the previous log point, in this session.

    `step` is the last step before the window (so the window's first step is step + 1); `time`
    is when the window began.
    """

    step: int
    time: float

    def restart(self, step: int, now: float) -> None:
        self.step, self.time = step, now

    def sps(self, global_step: int, now: float) -> float:
        return (global_step - self.step) / max(now - self.time, 1e-9)

    def pause(self, seconds: float) -> None:
        """Leave `seconds` out of the window (a checkpoint's pause is not training)."""
        self.time += seconds

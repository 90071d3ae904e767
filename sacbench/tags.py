"""The TensorBoard scalar tags a run writes: CleanRL's, plus sacbench's own (docs/contracts.md).

The trainer writes them and the results read them back, so each string lives here only.
"""

from __future__ import annotations

# TensorBoard's own test for event files (io_wrapper.IsTensorFlowEventsFile).
EVENT_FILE_MARKER = "tfevents"
# A text summary of every argument, written once at the start of a run.
HYPERPARAMETERS_TAG = "hyperparameters"

RETURN_TAG = "charts/episodic_return"
LENGTH_TAG = "charts/episodic_length"
SPS_TAG = "charts/SPS"
STEADY_SPS_TAG = "charts/steady_SPS"
ELAPSED_TAG = "charts/elapsed_seconds"
# The deterministic policy's evaluations (CleanRL's TD3/DDPG tag for the return): one point per
# evaluation episode, all at the step of their evaluation, so several points share a step.
EVAL_RETURN_TAG = "eval/episodic_return"
EVAL_LENGTH_TAG = "eval/episodic_length"
# The seconds spent evaluating so far (left out of charts/SPS and charts/elapsed_seconds), once
# per evaluation at its step.
EVAL_SECONDS_TAG = "charts/eval_seconds"

# The learners' metric names; each is written as loss_tag(name).
LOSS_NAMES: tuple[str, ...] = (
    "qf1_values",
    "qf2_values",
    "qf1_loss",
    "qf2_loss",
    "qf_loss",
    "actor_loss",
    "alpha",
    "alpha_loss",
)


def loss_tag(name: str) -> str:
    return f"losses/{name}"


# CleanRL's log cadence: the losses and charts/SPS (and sacbench's charts/steady_SPS and
# charts/elapsed_seconds) are written every LOG_EVERY steps once training has started
# (global_step > learning_starts); sac.algorithm.update_schedule marks these log points.
LOG_EVERY = 100
# The runtimes table's steady SPS never counts a run's first window (it may hold a session's
# first, slow updates), so each run needs at least this many charts/steady_SPS points.
MIN_STEADY_SPS_POINTS = 2


def log_steps(*, learning_starts: int, total_timesteps: int) -> range:
    """The global steps of a run's log points: every LOG_EVERY steps after learning_starts, up
    to its last step, total_timesteps - 1."""
    first = (learning_starts // LOG_EVERY + 1) * LOG_EVERY
    return range(first, total_timesteps, LOG_EVERY)


# Written at each log point (see LOG_EVERY).
LOSS_TAGS: tuple[str, ...] = tuple(loss_tag(name) for name in LOSS_NAMES)
# One point per finished episode, at the episode's last step.
EPISODE_TAGS: tuple[str, ...] = (RETURN_TAG, LENGTH_TAG)
# At the loss cadence; they measure time, so they differ between any two runs.
TIME_TAGS: tuple[str, ...] = (SPS_TAG, STEADY_SPS_TAG, ELAPSED_TAG)
# At each evaluation: one point per episode (may share a step), and the clock-dependent seconds.
EVAL_EPISODE_TAGS: tuple[str, ...] = (EVAL_RETURN_TAG, EVAL_LENGTH_TAG)
EVAL_TAGS: tuple[str, ...] = (*EVAL_EPISODE_TAGS, EVAL_SECONDS_TAG)
# Every tag whose values depend on the clock: the rest are reproducible for a fixed seed.
CLOCK_TAGS: tuple[str, ...] = (*TIME_TAGS, EVAL_SECONDS_TAG)

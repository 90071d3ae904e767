"""progress.json: how far a training run has got, for the people (and `sacbench.status`) watching.

The trainer rewrites the file atomically when a session starts, every LOG_EVERY steps (at most
once per MIN_WRITE_SECONDS; in the random-action phase too) and when its state changes, so a
reader never has to parse event files to follow a run. The
fields are documented in docs/contracts.md; SCHEMA_VERSION changes when one changes meaning.

The recent-returns window is part of the run's state: it goes into every checkpoint, so a
resumed run reports exactly what an uninterrupted one would.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sacbench.atomic import write_json_atomically
from sacbench.provenance import utc_now

SCHEMA_VERSION = 1
PROGRESS_FILE_NAME = "progress.json"
STATES: tuple[str, ...] = ("running", "completed", "stopped", "failed")
State = Literal["running", "completed", "stopped", "failed"]
# openrlbenchmark scores a run by the mean of its last 100 episodic returns; show the same.
RETURN_WINDOW = 100
# The current SPS covers about this much of the recent past: long enough to smooth out a
# checkpoint pause, short enough to follow a slowdown (a busy node, a thermal throttle).
RATE_WINDOW_SECONDS = 60.0
# An fsync'd rewrite costs ~10 ms. Every 100 steps is nothing at CPU speed (10-30 ms a step) but
# ~5% of a compiled GPU run's throughput (~700 SPS), which is what this benchmark measures.
MIN_WRITE_SECONDS = 1.0
# The trainer's progress line on stdout comes at most this often: a 1M-step run's log stays
# readable (CleanRL prints its SPS every 100 steps, 10,000 lines), yet a watcher sees it move.
PROGRESS_LINE_SECONDS = 10.0


def _check_int(name: str, value: object, *, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class RunProgress:
    """The trainer's side of progress.json: the state it carries and the writes.

    `saved` is what `checkpoint_state()` returned when the checkpoint being resumed was written
    (None for a fresh run, or a checkpoint from before progress.json existed: the returns window
    then restarts empty at the resumed step).
    """

    def __init__(
        self,
        *,
        path: Path,
        total_timesteps: int,
        learning_starts: int,
        start_step: int,
        saved: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.total_timesteps = _check_int("total_timesteps", total_timesteps, minimum=1)
        self.learning_starts = _check_int("learning_starts", learning_starts, minimum=0)
        self.start_step = _check_int("start_step", start_step, minimum=0)
        if start_step > total_timesteps:
            raise ValueError(f"start_step {start_step} is past total_timesteps {total_timesteps}")
        self._returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self._episodes = 0
        self._last_checkpoint: dict[str, Any] | None = None
        if saved is not None:
            self._restore(saved, checkpoint_step=start_step)
        self._hostname = socket.gethostname()
        # (monotonic time, global_step) at recent writes; a new session starts a new window.
        self._rate_samples: deque[tuple[float, int]] = deque([(time.monotonic(), start_step)])
        self._last_step = start_step
        self._last_write = -math.inf  # monotonic time of the last write
        self._last_line = self._rate_samples[0]  # (monotonic time, global_step) of the last line

    def _restore(self, saved: Mapping[str, Any], *, checkpoint_step: int) -> None:
        returns, episodes = saved.get("returns"), saved.get("episodes")
        if not isinstance(returns, Sequence) or not isinstance(episodes, int):
            raise ValueError(f"checkpoint progress state is malformed: {dict(saved)!r}")
        self._returns.extend(float(value) for value in returns)
        self._episodes = episodes
        self._last_checkpoint = {
            "global_step": checkpoint_step,
            "at": saved.get("saved_at"),
            "unix_time": saved.get("saved_unix_time"),
        }

    # ---- what the training loop reports --------------------------------------------------------

    def record_episode(self, *, episodic_return: float) -> None:
        # Rounded as TensorBoard stores it, so the mean is the one the report computes from
        # charts/episodic_return, not one that differs in the 8th digit.
        self._returns.append(float(np.float32(episodic_return)))
        self._episodes += 1

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint must hold for a resumed run to report the same returns window."""
        return {
            "returns": list(self._returns),
            "episodes": self._episodes,
            "saved_at": utc_now(),
            "saved_unix_time": time.time(),
        }

    def record_checkpoint(self, *, global_step: int) -> None:
        self._last_checkpoint = {
            "global_step": _check_int("global_step", global_step, minimum=0),
            "at": utc_now(),
            "unix_time": time.time(),
        }

    def print_line(self, *, global_step: int, label: str = "") -> None:
        """Print the progress line (after `label`) when PROGRESS_LINE_SECONDS have passed since
        the last one (or the session's start): the step, its share of the run, the steps per
        second since that line, the time left at that pace and the last episode's return."""
        now = time.monotonic()
        last_time, last_step = self._last_line
        if now - last_time < PROGRESS_LINE_SECONDS:
            return
        self._last_line = (now, global_step)
        sps = (global_step - last_step) / (now - last_time)
        left = self.total_timesteps - global_step
        eta = format_duration(left / sps) if sps > 0 else "–"
        last_return = f"{self._returns[-1]:.2f}" if self._returns else "none yet"
        print(
            f"{label}step={global_step}/{self.total_timesteps} "
            f"({100 * global_step / self.total_timesteps:.1f}%), SPS={sps:.1f}, ETA={eta}, "
            f"last_return={last_return}",
            flush=True,
        )

    # ---- the file ------------------------------------------------------------------------------

    def update(self, *, global_step: int, elapsed_seconds: float) -> None:
        """A running run's periodic report: written unless the last write is under
        MIN_WRITE_SECONDS old."""
        if time.monotonic() - self._last_write >= MIN_WRITE_SECONDS:
            self.write(global_step=global_step, elapsed_seconds=elapsed_seconds)

    def write(self, *, global_step: int, elapsed_seconds: float, state: State = "running") -> None:
        """Rewrite progress.json (atomically: a reader sees the old record or the new one)."""
        if state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        _check_int("global_step", global_step, minimum=0)
        if not (isinstance(elapsed_seconds, int | float) and math.isfinite(elapsed_seconds)):
            raise ValueError(f"elapsed_seconds must be a finite number, got {elapsed_seconds!r}")
        now = time.monotonic()
        sps, window = self._current_rate(global_step, now=now)
        self._last_step, self._last_write = global_step, now
        write_json_atomically(
            self.path, self._record(state, global_step, elapsed_seconds, sps=sps, window=window)
        )

    def write_failed(self, *, elapsed_seconds: float) -> None:
        """State "failed" at the last step written, best effort: it runs on the way out of an
        error, and must not replace that error with one of its own."""
        try:
            self.write(state="failed", global_step=self._last_step, elapsed_seconds=elapsed_seconds)
        except Exception as error:  # noqa: BLE001 - the training error is the one to report
            print(f"could not record the failure in {self.path}: {error}", file=sys.stderr)

    def _record(
        self,
        state: State,
        global_step: int,
        elapsed_seconds: float,
        *,
        sps: float | None,
        window: float | None,
    ) -> dict[str, Any]:
        now = time.time()
        returns = list(self._returns)
        return {
            "schema_version": SCHEMA_VERSION,
            "state": state,
            "global_step": global_step,
            "total_timesteps": self.total_timesteps,
            "learning_starts": self.learning_starts,
            "sps": sps,
            "sps_window_seconds": window,
            "cleanrl_sps": int(global_step / elapsed_seconds) if elapsed_seconds > 0 else None,
            "elapsed_seconds": elapsed_seconds,
            "episodes": self._episodes,
            "recent_returns": {
                "window": RETURN_WINDOW,
                "count": len(returns),
                "mean": sum(returns) / len(returns) if returns else None,
            },
            "last_checkpoint": self._last_checkpoint,
            "session_start_step": self.start_step,
            "pid": os.getpid(),
            "hostname": self._hostname,
            "updated_at": utc_now(),
            "updated_unix_time": now,
        }

    def _current_rate(self, global_step: int, *, now: float) -> tuple[float | None, float | None]:
        """Steps per second over the last ~RATE_WINDOW_SECONDS of this session, and the span.

        The random-action phase runs several times faster than training, so the window restarts
        when training begins; until two samples exist there is no rate (None).
        """
        if self._rate_samples[-1][1] <= self.learning_starts < global_step:
            self._rate_samples.clear()
        self._rate_samples.append((now, global_step))
        while len(self._rate_samples) > 2 and now - self._rate_samples[1][0] >= RATE_WINDOW_SECONDS:
            self._rate_samples.popleft()
        first_time, first_step = self._rate_samples[0]
        span = now - first_time
        if len(self._rate_samples) < 2 or span <= 0:
            return None, None
        return (global_step - first_step) / span, span


def format_duration(seconds: float) -> str:
    """A short duration: 45s, 12m05s, 3h07m, 2d04h."""
    whole = max(int(round(seconds)), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"

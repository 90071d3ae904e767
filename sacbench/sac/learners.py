"""What the training loop needs from an update path, and the choice between the two paths."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from sacbench.sac.algorithm import Actor, Batch, UpdateSchedule
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.reference_learner import ReferenceLearner


class Learner(Protocol):
    """What the loop needs from an update path."""

    actor: Actor  # both paths keep CleanRL's Actor; evaluation reads its deterministic action

    def act(self, observations: torch.Tensor) -> torch.Tensor: ...

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def make_learner(
    *,
    args: Args,
    obs_dim: int,
    action_low: np.ndarray,
    action_high: np.ndarray,
    device: torch.device,
) -> Learner:
    if args.update_path == "reference":
        return ReferenceLearner(
            obs_dim=obs_dim,
            action_low=action_low,
            action_high=action_high,
            args=args,
            device=device,
        )
    return FastLearner(
        obs_dim=obs_dim, action_low=action_low, action_high=action_high, args=args, device=device
    )

"""What the training loop needs from an update path, the choice between the two paths and of the
fast path's formulation, and the record of which update ran."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from sacbench.sac.algorithm import Actor, Batch, UpdateSchedule
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner, Gradients
from sacbench.sac.fused import (
    FusedFormulation,
    fused_update_extension,
    mkl_avx2_kernels_answered,
)
from sacbench.sac.reference_learner import ReferenceLearner


class Learner(Protocol):
    """What the loop needs from an update path."""

    actor: Actor  # both paths keep CleanRL's Actor; evaluation reads its deterministic action

    def act(self, observations: torch.Tensor) -> torch.Tensor: ...

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def fast_gradients(args: Args, device: torch.device) -> Gradients:
    """The formulation the trainer's fast path runs: the autograd one with --compile (for GPUs);
    on a CPU the fused C++ update (built here on first use; FusedUpdateUnavailable, saying why,
    where it cannot be built), unless --no-fused-update; elsewhere the eager hand-written one."""
    if args.compile:
        return "autograd"
    if args.fused_update and device.type == "cpu":
        fused_update_extension()
        return "fused"
    return "handwritten"


def update_record(learner: Learner) -> dict[str, object]:
    """Which update `learner` runs, as metadata.json records it: the path, the fast path's
    formulation, the library of its float32 matrix products ("aten": torch's own, MKL's on a CPU;
    "onednn": the fused update's, where sacbench.sac.fused.float32_products_library chooses
    it), whether its long products run in bfloat16 (--precision bf16), and "mkl_kernels": "avx2"
    where the fused update told MKL the CPU is Intel's, so that MKL runs its AVX2 kernels
    (AVX2-only CPUs: sacbench.sac.fused.mkl_avx2_kernels_wanted)."""
    if not isinstance(learner, FastLearner):
        return {"path": "reference", "float32_products_library": "aten", "bf16_products": False}
    formulation = learner.formulation
    fused = isinstance(formulation, FusedFormulation)
    record: dict[str, object] = {
        "path": "fast",
        "gradients": learner.gradients,
        "float32_products_library": formulation.extension.float32_products() if fused else "aten",
        "bf16_products": learner.args.precision == "bf16",
    }
    if fused and mkl_avx2_kernels_answered(formulation.extension):
        record["mkl_kernels"] = "avx2"
    return record


def make_learner(
    *,
    args: Args,
    obs_dim: int,
    action_low: np.ndarray,
    action_high: np.ndarray,
    device: torch.device,
    gradients: Gradients | None = None,
) -> Learner:
    """The learner of `args.update_path`; the fast path's formulation is `gradients`, by default
    fast_gradients' choice."""
    if args.update_path == "reference":
        return ReferenceLearner(
            obs_dim=obs_dim,
            action_low=action_low,
            action_high=action_high,
            args=args,
            device=device,
        )
    return FastLearner(
        obs_dim=obs_dim,
        action_low=action_low,
        action_high=action_high,
        args=args,
        device=device,
        gradients=fast_gradients(args, device) if gradients is None else gradients,
    )

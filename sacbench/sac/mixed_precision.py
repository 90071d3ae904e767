"""Mixed precision for the fast path (`--precision bf16`, opt-in, never the default).

Matrix products run in bfloat16 (operands rounded, float32 accumulation) while everything the
optimizers hold stays float32: the networks' weights (Adam's master copy), Adam's moments, alpha
and its optimizer, and the gradients handed to Adam. The policy's heads, the sampling and
log-probabilities, the Q-values, the targets and the losses are float32 too, so a bf16 run draws
the same random numbers as a float32 run.

- The hand-written formulation (the default) rounds the operands of the products that are at
  least 64 long on every side (the 256 x 256 hidden layers, wide input layers, the weight
  gradients) and keeps their results float32 (sacbench.sac.products,
  HandwrittenFormulation(product_dtype)).
- The autograd formulation (and so --compile) runs under torch.autocast through MixedPrecision
  below: every product in bfloat16, activations bfloat16, gradients cast back to float32.

Where the hardware multiplies bfloat16 natively (x86 CPUs with AVX512-BF16 or AMX, CUDA GPUs of
compute capability 8.0 and later), a product takes about half its float32 time; elsewhere torch
emulates it and it is much slower than float32 (docs/performance.md, "What was tried").
"""

from __future__ import annotations

from pathlib import Path

import torch

from sacbench.sac.algorithm import Batch
from sacbench.sac.cpu_features import CPUINFO, cpu_flags, has_native_bf16, read_cpuinfo
from sacbench.sac.formulation import ActorPass, FastNetworks, Formulation, Policy


def native_bf16_products(device: torch.device, *, cpuinfo: Path = CPUINFO) -> bool:
    """Whether `device` multiplies bfloat16 matrices in hardware (False when it cannot tell)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return has_native_bf16(cpu_flags(read_cpuinfo(cpuinfo)))


class MixedPrecision:
    """A formulation (sacbench.sac.formulation.Formulation) run under torch.autocast, so that
    its matrix products run in bfloat16; it returns float32 gradients and metrics, as the
    formulation it wraps does without it."""

    def __init__(self, inner: Formulation, *, device: torch.device) -> None:
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"bf16 products run on cpu or cuda, got device {device.type!r}")
        self.inner = inner
        self.device_type = device.type

    def _bf16_products(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def critic_gradients(
        self, nets: FastNetworks, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        with self._bf16_products():
            gradients, metrics = self.inner.critic_gradients(nets, batch, alpha=alpha, gamma=gamma)
        return _float32(gradients), metrics.float()

    def begin_actor_updates(
        self, nets: FastNetworks, observations: torch.Tensor, *, count: int
    ) -> ActorPass:
        with self._bf16_products():
            return self.inner.begin_actor_updates(nets, observations, count=count)

    def actor_gradients(
        self,
        nets: FastNetworks,
        observations: torch.Tensor,
        actor_pass: ActorPass,
        *,
        alpha: torch.Tensor | float,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        with self._bf16_products():
            gradients, loss = self.inner.actor_gradients(
                nets, observations, actor_pass, alpha=alpha
            )
        return _float32(gradients), loss.float()

    def updated_policy(
        self, nets: FastNetworks, observations: torch.Tensor, *, keep_graph: bool
    ) -> Policy:
        with self._bf16_products():
            return self.inner.updated_policy(nets, observations, keep_graph=keep_graph)

    def alpha_loss(
        self,
        nets: FastNetworks,
        policy: Policy,
        *,
        log_alpha: torch.Tensor,
        target_entropy: float,
    ) -> torch.Tensor:
        with self._bf16_products():
            loss = self.inner.alpha_loss(
                nets, policy, log_alpha=log_alpha, target_entropy=target_entropy
            )
        return loss.float()


def _float32(gradients: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Adam's fused kernel takes gradients of its parameters' dtype (a no-op when they are)."""
    return tuple(gradient.float() for gradient in gradients)

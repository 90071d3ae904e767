"""The contract between the fast learner and its two gradient formulations.

A formulation turns the learner's networks and a batch into gradients and metrics, and mutates
nothing but its own temporaries: sacbench.sac.fast_learner.FastLearner owns the networks, the
optimizers and alpha, and is the only place where they change. Keeping the formulations pure lets
one update loop serve both (sacbench.sac.handwritten writes the gradients out,
sacbench.sac.autograd asks torch.autograd), so the two cannot drift apart in what they update or
in which order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from sacbench.sac.algorithm import Actor, Batch
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.policy import PolicyForward

# The actor's output on a batch: the hand-written form keeps its intermediates (PolicyForward),
# the autograd form only (mean, log_std) with their graph.
Policy = PolicyForward | tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class FastNetworks:
    """The fast path's networks, read by a formulation (never written)."""

    actor: Actor
    critic: EnsembleCritic
    target_critic: EnsembleCritic
    critic_parameters: list[torch.Tensor]
    actor_parameters: list[torch.Tensor]


@dataclass(frozen=True)
class ActorPass:
    """What one step's actor updates share: the actor's output on the batch (None: to be
    computed) and the critics' first-layer product with the observations (None: not reused)."""

    policy: Policy | None
    observation_part: torch.Tensor | None


class Formulation(Protocol):
    """One step's gradient computations, in the order FastLearner.update calls them.

    The random draws come from torch's default generator in CleanRL's order: one standard-normal
    draw for the next actions in critic_gradients, one for the actions in each actor_gradients,
    and one in each alpha_loss.
    """

    def critic_gradients(
        self, nets: FastNetworks, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """(gradients in critic_parameters order, [5] metrics: q1, q2, loss1, loss2, loss/2)."""
        ...

    def begin_actor_updates(
        self, nets: FastNetworks, observations: torch.Tensor, *, count: int
    ) -> ActorPass:
        """What the `count` actor updates of this step can share (the critics stay fixed)."""
        ...

    def actor_gradients(
        self,
        nets: FastNetworks,
        observations: torch.Tensor,
        actor_pass: ActorPass,
        *,
        alpha: torch.Tensor | float,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """(gradients in actor_parameters order, the detached actor loss)."""
        ...

    def updated_policy(
        self, nets: FastNetworks, observations: torch.Tensor, *, keep_graph: bool
    ) -> Policy:
        """The actor's output after its update: for the alpha loss and the next actor update;
        `keep_graph` when another actor update will backpropagate through it."""
        ...

    def alpha_loss(
        self,
        nets: FastNetworks,
        policy: Policy,
        *,
        log_alpha: torch.Tensor,
        target_entropy: float,
    ) -> torch.Tensor:
        """The temperature loss (no graph: its gradient in log_alpha is the loss itself)."""
        ...

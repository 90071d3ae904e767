"""Both critics (and both targets) as one ensemble with stacked weights: one batched product per
layer instead of one per critic, for the fast update path."""

from __future__ import annotations

import torch
import torch.nn as nn

from sacbench.sac.products import affine


class EnsembleCritic(nn.Module):
    """`members` Q-networks (concat -> 256 -> ReLU -> 256 -> ReLU -> 1) evaluated together.

    Weights are stored [members, in, out] and biases [members, 1, out]; forward returns Q-values
    shaped [members, B].
    """

    def __init__(self, *, obs_dim: int, action_dim: int, members: int = 2, hidden: int = 256):
        super().__init__()
        self.obs_dim = obs_dim
        sizes = [(obs_dim + action_dim, hidden), (hidden, hidden), (hidden, 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in sizes:
            # nn.Linear's own initialisation, one member at a time, stored as [in, out].
            layers = [nn.Linear(fan_in, fan_out) for _ in range(members)]
            self.weights.append(
                nn.Parameter(torch.stack([lay.weight.T for lay in layers]).detach())
            )
            self.biases.append(
                nn.Parameter(torch.stack([lay.bias[None, :] for lay in layers]).detach())
            )

    def forward(
        self,
        observations: torch.Tensor,
        actions: torch.Tensor,
        *,
        detach_weights: bool = False,
        observation_part: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q-values [members, B]. `observation_part` (from `observation_part`, with detached
        weights) replaces the first layer's observation product when the caller reuses it."""
        (w1, w2, w3), (b1, b2, b3) = list(self.weights), list(self.biases)
        if detach_weights:
            w1, w2, w3, b1, b2, b3 = (t.detach() for t in (w1, w2, w3, b1, b2, b3))
        members = w1.shape[0]
        batch = observations.shape[0]
        if actions.requires_grad:
            # Two products instead of one on the concatenated input: backward then needs the
            # input gradient of the action part only ([B, action_dim], not [B, obs+action]).
            h = (
                observation_part
                if observation_part is not None
                else self.observation_part(observations, detach_weights=detach_weights)
            )
            h = torch.baddbmm(h, actions.expand(members, *actions.shape), w1[:, self.obs_dim :])
        else:
            x = torch.cat([observations, actions], dim=1)
            h = torch.baddbmm(b1, x.expand(members, *x.shape), w1)
        h = torch.baddbmm(b2, h.relu_(), w2).relu_()
        # Output layer as multiply + sum: a batched product with one output column is slow.
        return (h * w3.transpose(1, 2)).sum(-1) + b3.view(members, 1).expand(members, batch)

    def observation_part(
        self,
        observations: torch.Tensor,
        *,
        detach_weights: bool = False,
        product_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """The first layer's bias plus its observation product, [members, B, hidden], the
        product in `product_dtype` (sacbench.sac.products)."""
        w1, b1 = self.weights[0], self.biases[0]
        if detach_weights:
            w1, b1 = w1.detach(), b1.detach()
        members = w1.shape[0]
        expanded = observations.expand(members, *observations.shape)
        return affine(b1, expanded, w1[:, : self.obs_dim], dtype=product_dtype)

    @torch.no_grad()
    def load_from_pair(self, first: nn.Module, second: nn.Module) -> None:
        """Copy two sacbench.sac.algorithm.SoftQNetwork modules into members 0 and 1."""
        for layer_index, name in enumerate(("fc1", "fc2", "fc3")):
            for member, network in enumerate((first, second)):
                linear = getattr(network, name)
                self.weights[layer_index][member].copy_(linear.weight.T)
                self.biases[layer_index][member].copy_(linear.bias[None, :])

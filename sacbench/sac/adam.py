"""Adam as torch.optim.Adam(fused=True) computes it, stepped with gradients handed over directly.

Both fast update formulations (sacbench.sac.autograd, sacbench.sac.handwritten) get
their gradients as tuples rather than in .grad, and skip Optimizer.step's per-call bookkeeping
(hooks, grouping by device, reading .grad), which costs more than the kernel for networks this
small. The optimizers stay torch.optim.Adam objects, so their state_dict is torch's own; they
are built without importing torch._dynamo, which a training process otherwise spends 1-2 s on
(private_api.AdamWithoutDynamoImport).
"""

from __future__ import annotations

import torch

from sacbench import private_api


def prepared_adam(parameters: list[torch.Tensor], *, lr: float) -> torch.optim.Adam:
    """torch's Adam (defaults) with its state created up front, for adam_step to advance."""
    optimizer = private_api.AdamWithoutDynamoImport(parameters, lr=lr, fused=True)
    create_missing_adam_state(optimizer)
    return optimizer


def create_missing_adam_state(optimizer: torch.optim.Adam) -> None:
    """The state torch.optim.Adam(fused=True) creates on a parameter's first step."""
    for parameter in optimizer.param_groups[0]["params"]:
        if not optimizer.state[parameter]:
            optimizer.state[parameter] = private_api.fused_adam_state(parameter)


@torch.no_grad()
def adam_step(optimizer: torch.optim.Adam, gradients: tuple[torch.Tensor, ...]) -> None:
    """What optimizer.step() computes with fused=True, for `gradients` in parameter order."""
    (group,) = optimizer.param_groups
    parameters = group["params"]
    states = [optimizer.state[parameter] for parameter in parameters]
    steps = [state["step"] for state in states]
    private_api.foreach_add_(steps, 1)
    beta1, beta2 = group["betas"]
    private_api.fused_adam_(
        parameters,
        list(gradients),
        [state["exp_avg"] for state in states],
        [state["exp_avg_sq"] for state in states],
        steps,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
    )

"""The fast path's matrix products, in their operands' precision or in bfloat16.

`dtype=None` (the default) is torch's own product of the operands as they are, so the default
path computes exactly what it did before mixed precision existed. `dtype=torch.bfloat16`
(`--precision bf16`, sacbench.sac.mixed_precision) rounds the operands of each product whose
every side is at least MIN_ROUNDED_SIDE long, multiplies with float32 accumulation and returns
float32; the activations, biases, masks and everything downstream stay float32. Thinner products
(a 17-column input layer, heads of 6-17 outputs, batches of action columns) stay float32: on a
CPU, rounding their operands costs about what the product saves (docs/performance.md).
"""

from __future__ import annotations

import torch

MIN_ROUNDED_SIDE = 64


def rounds(left: torch.Tensor, right: torch.Tensor, dtype: torch.dtype | None) -> bool:
    """Whether left @ right runs in `dtype` (None: never)."""
    sides = (left.shape[-2], left.shape[-1], right.shape[-1])
    return dtype is not None and min(sides) >= MIN_ROUNDED_SIDE


def shared_operand(
    left: torch.Tensor, right: torch.Tensor, dtype: torch.dtype | None
) -> torch.Tensor:
    """`left` rounded once for several products that round as left @ right does; as it is when
    that product stays float32 (a thin one, or no `dtype`)."""
    return left.to(dtype) if rounds(left, right, dtype) else left


def product(left: torch.Tensor, right: torch.Tensor, *, dtype: torch.dtype | None) -> torch.Tensor:
    """left @ right (matrices, or batches of them); with a `dtype`, float32, from operands rounded
    to `dtype` when the product is large enough (`rounds`)."""
    multiply = torch.mm if left.dim() == 2 else torch.bmm
    if dtype is None:
        return multiply(left, right)
    if rounds(left, right, dtype):
        return multiply(left.to(dtype), right.to(dtype)).float()
    return multiply(left.float(), right.float())


def affine(
    bias: torch.Tensor, left: torch.Tensor, right: torch.Tensor, *, dtype: torch.dtype | None
) -> torch.Tensor:
    """bias + left @ right; with a `dtype`, the product as `product` computes it, plus the bias
    in float32."""
    add_product = torch.addmm if left.dim() == 2 else torch.baddbmm
    if dtype is None:
        return add_product(bias, left, right)
    if not rounds(left, right, dtype):
        return add_product(bias, left.float(), right.float())
    return product(left, right, dtype=dtype).add_(bias)

"""--precision bf16: the fast path's products in bfloat16, everything it keeps in float32
(sacbench.sac.mixed_precision, sacbench.sac.products)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import random_batch as batch_of_sizes
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args, recorded_run_args, run_defining_args, validate_args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.products import MIN_ROUNDED_SIDE, affine, product
from sacbench.sac.reference_learner import ReferenceLearner

aten = torch.ops.aten
PRODUCT_OPS = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default}
HIDDEN = 256  # the networks' hidden width
# Sizes on both sides of MIN_ROUNDED_SIDE (64): the batch and the observations are long enough
# for bfloat16 products, the actions (and so the heads) are not.
OBS_DIM, ACTION_DIM, BATCH = 80, 3, 96
LOW, HIGH = -np.ones(ACTION_DIM, dtype=np.float32), np.ones(ACTION_DIM, dtype=np.float32)
CPU = torch.device("cpu")


class ProductLog(TorchDispatchMode):
    """Records each matrix product's operand dtypes and (M, K, N), and every dtype any op saw."""

    def __init__(self) -> None:
        super().__init__()
        self.products: list[tuple[torch.dtype, torch.dtype, tuple[int, int, int]]] = []
        self.dtypes: set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        self.dtypes.update(tensor.dtype for tensor in tensors)
        if func in PRODUCT_OPS:
            left, right = tensors[-2:]
            shape = (left.shape[-2], left.shape[-1], right.shape[-1])
            self.products.append((left.dtype, right.dtype, shape))
        return func(*args, **(kwargs or {}))


def learner(
    gradients: str, *, precision: str, batch_size: int = BATCH, obs_dim: int = OBS_DIM
) -> FastLearner:
    torch.manual_seed(0)
    args = Args(batch_size=batch_size, precision=precision)  # type: ignore[arg-type]
    reference = ReferenceLearner(
        obs_dim=obs_dim, action_low=LOW, action_high=HIGH, args=args, device=CPU
    )
    return FastLearner.from_reference(reference, device=CPU, gradients=gradients)


def random_batch(generator: torch.Generator, fast: FastLearner) -> Batch:
    return batch_of_sizes(
        obs_dim=fast.actor.fc1.in_features,
        action_dim=ACTION_DIM,
        batch_size=fast.args.batch_size,
        generator=generator,
        termination_rate=0.3,
    )


def run_steps(fast: FastLearner, steps: range) -> list[dict[str, float]]:
    generator = torch.Generator().manual_seed(5)
    metrics = []
    for global_step in steps:
        schedule = update_schedule(global_step, learning_starts=5000, policy_frequency=2,
                                   target_network_frequency=1)  # fmt: skip
        torch.manual_seed(global_step)
        update = fast.update(random_batch(generator, fast), schedule)
        metrics.append({name: float(value) for name, value in update.items()})
    return metrics


def one_step_products(fast: FastLearner) -> ProductLog:
    run_steps(fast, range(5001, 5002))  # warm (lazy state) outside the log
    with ProductLog() as log:
        run_steps(fast, range(5002, 5003))  # critic, two actor and alpha updates, targets
    return log


def test_handwritten_bf16_rounds_exactly_the_products_long_on_every_side():
    log = one_step_products(learner("handwritten", precision="bf16"))
    long = [entry for entry in log.products if min(entry[2]) >= MIN_ROUNDED_SIDE]
    thin = [entry for entry in log.products if min(entry[2]) < MIN_ROUNDED_SIDE]
    # Among the long ones: every 256 x 256 hidden layer's forward, input-gradient and
    # weight-gradient product, and the input layers' (80 observation columns).
    hidden = [entry for entry in long if entry[2][2] == HIDDEN and HIDDEN in entry[2][:2]]
    inputs = [entry for entry in long if {OBS_DIM, OBS_DIM + ACTION_DIM} & set(entry[2])]
    assert len(hidden) >= 12 and len(inputs) >= 5 and thin  # thin: heads and action columns
    assert {(left, right) for left, right, _ in long} == {(torch.bfloat16, torch.bfloat16)}
    assert {(left, right) for left, right, _ in thin} == {(torch.float32, torch.float32)}


def test_handwritten_bf16_with_only_thin_products_never_touches_bfloat16():
    """A batch of 32 and 11 observation columns: no product is long on every side, so a bf16
    update computes what a float32 one does, without even rounding a shared operand."""
    thin = {"batch_size": 32, "obs_dim": 11}
    log = one_step_products(learner("handwritten", precision="bf16", **thin))
    assert log.products and torch.bfloat16 not in log.dtypes
    bf16, fp32 = (learner("handwritten", precision=p, **thin) for p in ("bf16", "fp32"))
    steps = range(5001, 5005)
    assert run_steps(bf16, steps) == run_steps(fp32, steps)
    assert torch.equal(flat(bf16.actor), flat(fp32.actor))


def test_autograd_bf16_runs_every_product_in_bfloat16():
    log = one_step_products(learner("autograd", precision="bf16"))
    assert len(log.products) >= 20
    assert {(left, right) for left, right, _ in log.products} == {(torch.bfloat16, torch.bfloat16)}


@pytest.mark.parametrize("gradients", ["handwritten", "autograd"])
def test_fp32_default_never_touches_bfloat16(gradients):
    log = one_step_products(learner(gradients, precision="fp32"))
    assert log.products and torch.bfloat16 not in log.dtypes


@pytest.mark.parametrize("gradients", ["handwritten", "autograd"])
def test_bf16_keeps_weights_adam_state_and_alpha_in_float32(gradients):
    fast = learner(gradients, precision="bf16")
    run_steps(fast, range(5001, 5005))
    optimizers = (fast.q_optimizer, fast.actor_optimizer, fast.alpha_optimizer)
    for optimizer in optimizers:
        for parameter in optimizer.param_groups[0]["params"]:
            assert parameter.dtype == torch.float32
            state = optimizer.state[parameter]
            assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    for network in (fast.actor, fast.critic, fast.target_critic):
        assert {tensor.dtype for tensor in network.state_dict().values()} == {torch.float32}
    assert isinstance(fast.alpha, torch.Tensor) and fast.alpha.dtype == torch.float32
    assert {value.dtype for value in fast.metrics().values()} == {torch.float32}


@pytest.mark.parametrize("gradients", ["handwritten", "autograd"])
def test_bf16_updates_follow_fp32_within_bfloat16_rounding(gradients):
    """Same networks, batches and draws for 8 steps: the losses agree to bfloat16's ~3
    significant digits, and where the parameters moved differs from float32's by a few percent
    of how far they moved (Adam normalises each step, so a sign that rounding flips on a tiny
    gradient moves that parameter by the full step: hence a norm, not a maximum)."""
    fp32, bf16 = learner(gradients, precision="fp32"), learner(gradients, precision="bf16")
    start = {name: flat(getattr(fp32, name)) for name in ("actor", "critic")}
    steps = range(5001, 5009)
    for ours, theirs in zip(run_steps(bf16, steps), run_steps(fp32, steps), strict=True):
        assert ours.keys() == theirs.keys()
        for name, value in theirs.items():
            assert ours[name] == pytest.approx(value, rel=3e-2, abs=1e-3), name
    for name, before in start.items():
        moved = flat(getattr(fp32, name)) - before
        apart = flat(getattr(bf16, name)) - flat(getattr(fp32, name))
        assert 0 < apart.norm() < 0.2 * moved.norm(), name


def flat(network: torch.nn.Module) -> torch.Tensor:
    return torch.cat([tensor.detach().flatten() for tensor in network.parameters()])


def test_products_round_long_operands_only_and_return_float32():
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(MIN_ROUNDED_SIDE, HIDDEN, generator=generator)
    right = torch.randn(HIDDEN, MIN_ROUNDED_SIDE, generator=generator)
    bias = torch.randn(MIN_ROUNDED_SIDE, generator=generator)
    exact = left.double() @ right.double()
    rounded = left.bfloat16().double() @ right.bfloat16().double()
    assert torch.equal(product(left, right, dtype=None), left @ right)
    low = product(left, right, dtype=torch.bfloat16)
    assert low.dtype == torch.float32
    # The product of the rounded operands, itself rounded to bfloat16 (8 significant bits).
    torch.testing.assert_close(low.double(), rounded, rtol=2**-8, atol=1e-3)
    assert float((low.double() - exact).abs().max()) > 1e-3  # not the float32 product
    torch.testing.assert_close(
        affine(bias, left, right, dtype=torch.bfloat16), low + bias, rtol=0, atol=0
    )
    batched = torch.stack([left, 2 * left]), torch.stack([right, right])
    torch.testing.assert_close(
        product(*batched, dtype=torch.bfloat16)[1], product(2 * left, right, dtype=torch.bfloat16)
    )
    # One side shorter than MIN_ROUNDED_SIDE: float32, whatever the operands' dtype.
    thin = right[:, :-1]
    assert torch.equal(product(left, thin, dtype=torch.bfloat16), left @ thin)
    assert torch.equal(
        product(left.bfloat16(), thin, dtype=torch.bfloat16), left.bfloat16().float() @ thin
    )
    assert torch.equal(
        affine(bias[:-1], left, thin, dtype=torch.bfloat16), torch.addmm(bias[:-1], left, thin)
    )


def test_precision_is_run_defining_and_old_runs_were_fp32():
    assert run_defining_args(Args(precision="bf16"))["precision"] == "bf16"
    recorded_before_precision = {
        key: value for key, value in run_defining_args(Args()).items() if key != "precision"
    }
    assert recorded_run_args(recorded_before_precision) == run_defining_args(Args())


def test_bad_precision_arguments_are_named():
    assert validate_args(Args(precision="bf16")) == []
    (problem,) = validate_args(Args(precision="bf16", update_path="reference"))
    assert "--precision bf16" in problem and "--update-path fast" in problem
    (problem,) = validate_args(Args(precision="fp16"))  # type: ignore[arg-type]
    assert "--precision" in problem and "'fp16'" in problem

"""Where one fast SAC update's time goes, on one thread: matrix multiplies, other ops, overhead.

Profiles `--updates` consecutive fast updates (CleanRL's schedule, batch 256) with
torch.profiler, then splits the time into
- GEMM: aten::mm/addmm/addmm_/bmm/baddbmm, with their FLOPs (from the recorded shapes) and the rate
  they ran at, next to the rate of a lone 256x256x256 matmul on this machine (the practical peak);
- the other ATen ops (elementwise, reductions, the fused Adam kernel, random draws), by name;
- overhead: the rest of the wall time (Python, autograd engine, dispatcher, allocator).
The unprofiled time per update is printed too, since the profiler itself adds overhead per op.

The profiler also inflates the elementwise operations on fresh [2, 256, 256] tensors several
times over, so for the hand-written gradients (the default) the script first times each stage
of the update without it: every function of sacbench.sac.handwritten that the update calls,
and the learner's adam_step, is wrapped in a wall-clock timer (on CPU each call is synchronous),
and the rest of the update (the first layers' products, the target lerp, the small operations in
between) is reported as the remainder.
Then each matrix product is timed where the update calls it (a wall-clock timer around each
call) and alone, repeated on a copy of the same operands (same shapes and strides): the ratio
says how much the step's surroundings (operands fetched from L3 or memory, an output not yet in
cache) cost each product, against what its own arithmetic and per-call cost take.

Last, what bounds the hand-written update: the same updates once more with every matrix product
that the formulation's modules call replaced by a zero-filled result of its shape. What that
costs is everything but the products (elementwise work, reductions, Adam, random draws, Python
and dispatch); the plain time minus it is what the products take, and their rate against the
lone matmul's says how close they run to what the core can do. It is an estimate: zeros change
which critic each row's minimum picks, not the amount of elementwise work. The reference
update is timed in the same run (alternating rounds on the same batches), so the last line
gives the fast update's ratio now, the time 2.5x would need, and the ratio the update could
reach if everything but its products cost nothing: the most that fusing, preallocating or
compiling the rest can give on this CPU.

    python benchmarks/profile_step.py                       # HalfCheetah-v4 shapes
    python benchmarks/profile_step.py --env Humanoid-v4 --top 20
    python benchmarks/profile_step.py --precision bf16      # the products in bfloat16
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
import torch
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile

from sacbench.sac import ensemble, fast_learner, handwritten, policy, products
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.fused import float32_products_through
from sacbench.sac.reference_learner import ReferenceLearner
from sacbench.training.envs import EnvError, env_spaces

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")
LEARNING_STARTS = 5_000
# (module, function) pairs timed in place: the hand-written formulation's stages, looked up in
# its own namespace, and the optimizer step, which the learner applies.
TIMED_STAGES: tuple[tuple[ModuleType, str], ...] = (
    *(
        (handwritten, name)
        for name in (
            "policy_forward",
            "squashed_sample",
            "soft_q_target",
            "critic_inputs",
            "critic_forward",
            "critic_loss_gradients",
            "min_critic_action_gradient",
            "policy_gradients",
            "alpha_loss_fn",
        )
    ),
    (fast_learner, "adam_step"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v4", help="its sizes shape the update")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--updates", type=int, default=20, help="profiled updates (even: 2 steps)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=300,
        help="untimed updates first (bf16: oneDNN builds a kernel per row count of the actor "
        "step's gathered products during the first few hundred)",
    )
    parser.add_argument("--top", type=int, default=15, help="non-GEMM ops to list")
    parser.add_argument(
        "--gradients",
        choices=["handwritten", "autograd", "fused"],
        default="handwritten",
        help="the fast path's gradient formulation (autograd is what --compile compiles; fused "
        "is --fused-update, whose own loops count as overhead here)",
    )
    parser.add_argument("--compile", action="store_true", help="profile the compiled fast path")
    parser.add_argument(
        "--precision", choices=["fp32", "bf16"], default="fp32", help="the trainer's --precision"
    )
    args = parser.parse_args(argv)
    if args.updates <= 0 or args.batch_size <= 0 or args.warmup < 0:
        parser.error("--updates and --batch-size must be positive, --warmup non-negative")
    try:
        env_spaces(args.env)
    except EnvError as error:
        parser.error(f"--env: {error}")
    if args.compile and args.gradients != "autograd":
        parser.error("--compile compiles the autograd formulation: add --gradients autograd")
    return args


def seeded_fast_learner(*, obs_dim: int, action_dim: int, batch_size: int) -> FastLearner:
    """A fast learner from seed 1, actions in [-1, 1], one per side of an A/B timing (levers.py,
    fused_sections.py): two of them start from the same networks."""
    torch.manual_seed(1)
    return FastLearner(
        obs_dim=obs_dim,
        action_low=-np.ones(action_dim, dtype=np.float32),
        action_high=np.ones(action_dim, dtype=np.float32),
        args=Args(batch_size=batch_size),
        device=torch.device("cpu"),
    )


def refuse_bad_counts_and_env(
    parser: argparse.ArgumentParser, options: argparse.Namespace, counts: tuple[str, ...]
) -> None:
    """parser.error naming the first of `counts` (option names) that is not positive, or an
    --env that gymnasium cannot make (levers.py, fused_sections.py)."""
    for name in counts:
        if getattr(options, name) <= 0:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} must be positive, got {getattr(options, name)}")
    try:
        env_spaces(options.env)
    except EnvError as error:
        parser.error(f"--env: {error}")


def gemm_flops(name: str, shapes: list[list[int]]) -> float:
    """2*M*N*K (times the batch) from the recorded input shapes of one GEMM call."""
    if name in ("aten::mm", "aten::addmm", "aten::addmm_"):
        a, b = (shapes[0], shapes[1]) if name == "aten::mm" else (shapes[1], shapes[2])
        return 2.0 * a[0] * a[1] * b[1]
    a, b = (shapes[1], shapes[2]) if name == "aten::baddbmm" else (shapes[0], shapes[1])
    return 2.0 * a[0] * a[1] * a[2] * b[2]


def matmul_peak_gflops(dtype: torch.dtype = torch.float32) -> float:
    a, b = torch.randn(256, 256, dtype=dtype), torch.randn(256, 256, dtype=dtype)
    for _ in range(20):
        a @ b
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(50):
            a @ b
        best = min(best, (time.perf_counter() - started) / 50)
    return 2 * 256**3 / best / 1e9


def random_batch(
    *,
    obs_dim: int,
    action_dim: int,
    batch_size: int,
    generator: torch.Generator,
    termination_rate: float = 0.01,
) -> Batch:
    """Standard-normal observations and rewards, uniform actions in [-1, 1] (also used by the
    tests that need a batch of given sizes)."""
    return Batch(
        observations=torch.randn(batch_size, obs_dim, generator=generator),
        next_observations=torch.randn(batch_size, obs_dim, generator=generator),
        actions=torch.rand(batch_size, action_dim, generator=generator) * 2 - 1,
        rewards=torch.randn(batch_size, generator=generator),
        terminations=(torch.rand(batch_size, generator=generator) < termination_rate).float(),
    )


def stage_times(run_updates: Callable[[], None], count: int) -> list[list[object]]:
    """Rows (stage, ms per update, calls per update) for `count` updates of the hand-written
    update, each stage function of sacbench.sac.handwritten timed in place, plus the remainder."""
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    originals = {(module, name): getattr(module, name) for module, name in TIMED_STAGES}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
                calls[name] += 1

        return wrapper

    for (module, name), function in originals.items():
        setattr(module, name, timed(name, function))
    try:
        started = time.perf_counter()
        run_updates()
        total = time.perf_counter() - started
    finally:
        for (module, name), function in originals.items():
            setattr(module, name, function)
    rows: list[list[object]] = [
        [name, f"{spent[name] / count * 1e3:.3f}", f"{calls[name] / count:.1f}"]
        for name in sorted(spent, key=lambda stage: -spent[stage])
    ]
    rest = total - sum(spent.values())
    rows.append(["rest of the update", f"{rest / count * 1e3:.3f}", ""])
    rows.append(["whole update", f"{total / count * 1e3:.3f}", ""])
    return rows


class TorchWithoutProducts:
    """torch, as the formulation's modules see it, with each matrix product replaced by a
    zero-filled result of the product's shape and dtype."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def mm(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return left.new_zeros(left.shape[0], right.shape[1])

    @staticmethod
    def bmm(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        batch = max(left.shape[0], right.shape[0])
        return left.new_zeros(batch, left.shape[1], right.shape[2])

    @staticmethod
    def addmm(bias: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return bias.expand(left.shape[0], right.shape[1]).clone()

    @staticmethod
    def baddbmm(bias: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        batch = max(left.shape[0], right.shape[0])
        return bias.expand(batch, left.shape[1], right.shape[2]).clone()


# Every module whose functions the hand-written update calls products from.
PRODUCT_CALLERS: tuple[ModuleType, ...] = (handwritten, policy, ensemble, products)


class TimedProducts:
    """torch, as the formulation's modules see it, with each matrix product timed where the
    update calls it, and one copy of its operands kept per (product, shapes) to time it alone."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.operands: dict[tuple[str, str], tuple[torch.Tensor, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        function = getattr(torch, name)
        if name not in PRODUCT_NAMES:
            return function

        def timed(*operands: torch.Tensor) -> torch.Tensor:
            started = time.perf_counter()
            result = function(*operands)
            spent = time.perf_counter() - started
            key = (name, " ".join("x".join(map(str, operand.shape)) for operand in operands))
            self.seconds[key] += spent
            self.calls[key] += 1
            if key not in self.operands:
                self.operands[key] = tuple(same_layout_copy(operand) for operand in operands)
            return result

        return timed


PRODUCT_NAMES = ("mm", "bmm", "addmm", "baddbmm")


def same_layout_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same shape and strides (transposed and expanded views stay so)."""
    if 0 in tensor.stride():  # an expanded view: copy_ cannot write overlapping elements
        return tensor.clone().as_strided(tensor.shape, tensor.stride())
    copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype)
    return copy.copy_(tensor)


def product_times(run_updates: Callable[[], None], count: int, *, top: int) -> list[list[object]]:
    """Rows (product, operand shapes, calls per update, µs per call in the step, µs per call
    alone on a copy of its operands, the ratio) for the `top` products by time in the step."""
    timed = TimedProducts()
    with products_through(timed):
        run_updates()
    rows: list[list[object]] = []
    for key in sorted(timed.seconds, key=lambda key: -timed.seconds[key])[:top]:
        name, shapes = key
        operands = timed.operands[key]
        function = getattr(torch, name)
        for _ in range(3):
            function(*operands)
        repeats = 20
        started = time.perf_counter()
        for _ in range(repeats):
            function(*operands)
        alone_us = (time.perf_counter() - started) / repeats * 1e6
        in_step_us = timed.seconds[key] / timed.calls[key] * 1e6
        rows.append(
            [
                name,
                shapes,
                f"{timed.calls[key] / count:.1f}",
                f"{in_step_us:.0f}",
                f"{alone_us:.0f}",
                f"{in_step_us / alone_us:.2f}",
            ]
        )
    return rows


@contextmanager
def products_through(shim: Any) -> Iterator[None]:
    """The formulation's modules call torch through `shim` inside the block (the shims above
    replace, time or redirect their matrix products)."""
    for module in PRODUCT_CALLERS:
        module.torch = shim  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in PRODUCT_CALLERS:
            module.torch = torch  # type: ignore[attr-defined]


def time_without_products(run_updates: Callable[[], None], count: int) -> float:
    """Milliseconds per update with every product skipped (the learner's state is garbage
    afterwards: call it last)."""
    with products_through(TorchWithoutProducts()):
        started = time.perf_counter()
        run_updates()
        return (time.perf_counter() - started) / count * 1e3


def random_batches(
    *, obs_dim: int, action_dim: int, batch_size: int, count: int = 8, seed: int = 2
) -> list[Batch]:
    """`count` random batches from one generator: the batches the timed updates cycle through."""
    generator = torch.Generator().manual_seed(seed)
    return [
        random_batch(
            obs_dim=obs_dim, action_dim=action_dim, batch_size=batch_size, generator=generator
        )
        for _ in range(count)
    ]


def run_updates(learner: Any, batches: list[Batch], steps: range) -> None:
    """The updates of `steps` on CleanRL's schedule (policy_frequency 2), cycling the batches."""
    for step in steps:
        schedule = update_schedule(
            step, learning_starts=LEARNING_STARTS, policy_frequency=2, target_network_frequency=1
        )
        learner.update(batches[step % len(batches)], schedule)


def quartiles(values: list[float], *, digits: int = 3) -> str:
    """The lower and upper quartile of per-round ratios as "low-high" (levers.py,
    thin_products.py); one value is its own range."""
    if len(values) < 2:
        return f"{values[0]:.{digits}f}-{values[0]:.{digits}f}"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{low:.{digits}f}-{high:.{digits}f}"


def alternating_rounds(
    first: Any,
    second: Any,
    *,
    steps: range,
    rounds: int,
    run: Callable[[Any, range], None],
) -> tuple[list[float], list[float]]:
    """Milliseconds per update of each learner in each of `rounds` rounds of `steps`, the two
    taking turns to go first (so drifting machine speed hits both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for round_index in range(rounds):
        order = [(first, times[0]), (second, times[1])]
        for learner, spent in order if round_index % 2 == 0 else reversed(order):
            started = time.perf_counter()
            run(learner, steps)
            spent.append((time.perf_counter() - started) / len(steps) * 1e3)
    return times


def bound_line(reference_ms: float, fast_ms: float, product_ms: float, floor_ms: float) -> str:
    """The fast update against the reference's in the same run, and the most it could gain if
    everything but the products cost nothing: at the products' rate here, and at the lone
    matmul's."""
    against = (
        f"Against the reference update ({reference_ms:.2f} ms in the same run, alternating "
        f"rounds): now {reference_ms / fast_ms:.2f}x; 2.5x needs {reference_ms / 2.5:.2f} ms. "
    )
    if product_ms <= 0:  # the products within the timing noise: only a tiny batch does that
        return against + "The products are within the noise here: no bound to give."
    return against + (
        f"With everything but the products free: {reference_ms / product_ms:.2f}x at the "
        f"products' rate here, {reference_ms / floor_ms:.2f}x at the lone matmul's."
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(1)
    spaces = env_spaces(options.env)
    obs_dim, action_dim = spaces.observation_size, spaces.action_size
    learner = FastLearner(
        obs_dim=obs_dim,
        action_low=-np.ones(action_dim, dtype=np.float32),
        action_high=np.ones(action_dim, dtype=np.float32),
        args=Args(
            batch_size=options.batch_size, compile=options.compile, precision=options.precision
        ),
        device=torch.device("cpu"),
        gradients=options.gradients,
    )
    batches = random_batches(obs_dim=obs_dim, action_dim=action_dim, batch_size=options.batch_size)
    products_note, restore = "", contextlib.ExitStack()
    if options.gradients == "fused":
        # The profiler sees ATen's products only, not the oneDNN calls the C++ makes where
        # fused.float32_products_library chooses them: profile the update with ATen's.
        restore.enter_context(float32_products_through(learner.formulation.extension, "aten"))
        products_note = " (float32 products through ATen, so that the profiler sees them)"

    def updates(count: int, first: int) -> None:
        run_updates(learner, batches, range(first, first + count))

    first = LEARNING_STARTS + 2  # an even step: the profiled window starts with actor updates
    updates(options.warmup, first)
    started = time.perf_counter()
    updates(options.updates, first)
    plain_ms = (time.perf_counter() - started) / options.updates * 1e3
    stages = (
        stage_times(lambda: updates(options.updates, first), options.updates)
        if learner.gradients == "handwritten"
        else None
    )

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        started = time.perf_counter()
        updates(options.updates, first)
        profiled_ms = (time.perf_counter() - started) / options.updates * 1e3

    gemm_us, gemm_flop = 0.0, 0.0
    other_us: dict[str, float] = defaultdict(float)
    other_calls: dict[str, int] = defaultdict(int)
    for event in profiler.events():
        if not event.name.startswith("aten::") or event.self_cpu_time_total <= 0:
            continue
        if event.name in GEMM_OPS:
            gemm_us += event.self_cpu_time_total
            gemm_flop += gemm_flops(event.name, event.input_shapes)
        else:
            other_us[event.name] += event.self_cpu_time_total
            other_calls[event.name] += 1
    per_update = 1e3 * options.updates  # microseconds in total -> milliseconds per update
    gemm_ms = gemm_us / per_update
    other_ms = sum(other_us.values()) / per_update
    overhead_ms = profiled_ms - gemm_ms - other_ms
    peak = matmul_peak_gflops()
    floor_ms = gemm_flop / options.updates / (peak * 1e9) * 1e3

    print(
        f"{options.env} shapes (obs {obs_dim}, act {action_dim}), batch {options.batch_size}, "
        f"1 thread, {'compiled' if options.compile else 'eager'} fast path, "
        f"{options.gradients} gradients, --precision {options.precision}{products_note}"
    )
    print(f"update without profiler: {plain_ms:.2f} ms; with profiler: {profiled_ms:.2f} ms\n")
    print(
        tabulate(
            [
                [
                    "GEMM",
                    f"{gemm_ms:.2f}",
                    f"{100 * gemm_ms / profiled_ms:.0f}%",
                    f"{gemm_flop / options.updates / 1e6:.0f} MFLOP at "
                    f"{gemm_flop / (gemm_us * 1e-6) / 1e9:.0f} GFLOP/s; at the lone 256^3 "
                    f"matmul's {peak:.0f} GFLOP/s: {floor_ms:.2f} ms",
                ],
                ["other ATen ops", f"{other_ms:.2f}", f"{100 * other_ms / profiled_ms:.0f}%", ""],
                [
                    "overhead (Python, autograd, dispatch; fused: its C++ loops)",
                    f"{overhead_ms:.2f}",
                    f"{100 * overhead_ms / profiled_ms:.0f}%",
                    "profiled wall time not inside any ATen op",
                ],
            ],
            headers=["where", "ms / update", "share", "note"],
            tablefmt="github",
        )
    )
    if stages is not None:
        print("\nStages of the hand-written update, timed without the profiler:\n")
        print(
            tabulate(stages, headers=["stage", "ms / update", "calls / update"], tablefmt="github")
        )
        products_in_step = product_times(
            lambda: updates(options.updates, first), options.updates, top=options.top
        )
        print("\nMatrix products timed where the update calls them, and alone on a copy:\n")
        print(
            tabulate(
                products_in_step,
                headers=[
                    "product",
                    "operand shapes",
                    "calls / update",
                    "µs / call in the step",
                    "µs alone",
                    "step / alone",
                ],
                tablefmt="github",
            )
        )
    top = sorted(other_us.items(), key=lambda item: -item[1])[: options.top]
    print()
    print(
        tabulate(
            [
                [name, f"{us / per_update:.3f}", f"{other_calls[name] / options.updates:.1f}"]
                for name, us in top
            ],
            headers=["non-GEMM op", "ms / update", "calls / update"],
            tablefmt="github",
        )
    )
    if learner.gradients == "handwritten":
        reference = ReferenceLearner(
            obs_dim=obs_dim,
            action_low=-np.ones(action_dim, dtype=np.float32),
            action_high=np.ones(action_dim, dtype=np.float32),
            args=Args(batch_size=options.batch_size),
            device=torch.device("cpu"),
        )

        def run(one: Any, steps: range) -> None:
            run_updates(one, batches, steps)

        run(reference, range(first, first + min(options.warmup, 100)))
        fast_times, reference_times = alternating_rounds(
            learner, reference, steps=range(first, first + options.updates), rounds=5, run=run
        )
        plain_ms, reference_ms = statistics.median(fast_times), statistics.median(reference_times)
        rest_ms = time_without_products(lambda: updates(options.updates, first), options.updates)
        product_ms = plain_ms - rest_ms
        mflop = gemm_flop / options.updates / 1e6
        lone = f"a lone 256^3 float32 matmul runs at {peak:.0f} GFLOP/s here"
        lone_rate = peak
        if options.precision == "bf16":
            lone_rate = matmul_peak_gflops(torch.bfloat16)
            lone += f", a bfloat16 one at {lone_rate:.0f}"
        rate = f"at {mflop / product_ms:.0f} GFLOP/s" if product_ms > 0 else "within the noise"
        print(
            f"\nWhat bounds it: the update takes {plain_ms:.2f} ms; with its products skipped "
            f"{rest_ms:.2f} ms. The products take the difference, {product_ms:.2f} ms "
            f"({mflop:.0f} MFLOP {rate}; {lone})."
        )
        print(bound_line(reference_ms, plain_ms, product_ms, mflop / lone_rate))
    print(f"\nload average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    restore.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Levers tried on the fast update, each timed against the default in one run. fused-update was
kept, as the trainer's --fused-update; the others were not (docs/performance.md).

    python benchmarks/levers.py preallocated-outputs [--env Humanoid-v4] [--rounds 13]
    python benchmarks/levers.py compiled-critic-step [--rounds 9]
    python benchmarks/levers.py python-dispatch
    python benchmarks/levers.py fused-critic-step [--env Humanoid-v4] [--rounds 13]
    python benchmarks/levers.py fused-update [--env Humanoid-v4] [--rounds 13]
    python benchmarks/levers.py fused-one-call [--env Humanoid-v4] [--rounds 15]
    python benchmarks/levers.py fused-act [--env Humanoid-v4] [--rounds 15]

- preallocated-outputs: every product of the hand-written update writes with out= into a buffer
  kept per call site (keyed by the step's parity, the call's position in the update and the
  shape), so no product allocates and each writes to the same memory on every update. Products
  whose row count changes (the actor step's gathered rows) allocate as before.
- compiled-critic-step: the hand-written critic step (`HandwrittenFormulation.critic_gradients`)
  compiled by torch.compile (inductor), which fuses its elementwise work into C++ kernels; its
  ReLU backward becomes `masked_fill_`, since threshold_backward's out= form does not trace.
- python-dispatch: what calling an ATen operation from Python costs over calling it from C++,
  on the update's tensor shapes (a C++ loop built with torch.utils.cpp_extension.load_inline,
  which needs a C++ compiler and ninja).
- fused-critic-step: the hand-written critic step in C++ (sacbench/sac/fused_update.cpp, built
  with torch.utils.cpp_extension for this CPU on first use): the same MKL products, one critic
  member at a time, and each chain of elementwise work between two products fused into one pass.
- fused-update: the same for every step of the update (critic step, the actor's forward passes,
  actor step, the alpha loss's log-probabilities), driven step by step by FastLearner's loop,
  which keeps Adam, the target update and the order of the draws.
- fused-one-call: the fused update as --fused-update now runs it (one call of fused_update.cpp's
  `update` per training step, Adam and the target update included) against the fused update
  driven step by step as above (`FusedFormulation(one_call=False)`): what the Python between the
  steps costs.
- fused-act: the policy's action for one observation as the training loop asks for it
  (`select_action`: numpy in, numpy out), through the eager policy (sample_action_fast, as
  FastLearner.act did before) against fused_update.cpp's `act` (as --fused-update now acts).
  Both learners train with --fused-update's one-call update; each round times every action right
  after an update, where the loop acts (caches cold), and prints both actions' times, their
  ratio, and the saving's share of an update and an action.

All but python-dispatch and fused-act build two fast learners from the same seed, check how far
their parameters differ after `--check` updates from the same state and draws, then time them in
alternating rounds of `--updates` updates on the same batches, one thread, and print the median
of the per-round ratios default / lever (above 1: the lever is faster; for fused-one-call the
"default" is the fused update driven step by step); the levers that replace the critic step
(compiled-critic-step, fused-critic-step, fused-update) also time that step alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tabulate import tabulate

from sacbench import private_api
from sacbench.sac import handwritten
from sacbench.sac.algorithm import Batch
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.fused import FusedFormulation
from sacbench.sac.policy import sample_action_fast
from sacbench.training.envs import env_spaces
from sacbench.training.loop import select_action

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the sibling module

from profile_step import (  # noqa: E402
    LEARNING_STARTS,
    alternating_rounds,
    products_through,
    quartiles,
    random_batches,
    refuse_bad_counts_and_env,
    run_updates,
    seeded_fast_learner,
)

LEVERS = (
    "preallocated-outputs",
    "compiled-critic-step",
    "python-dispatch",
    "fused-critic-step",
    "fused-update",
    "fused-one-call",
    "fused-act",
)
PRODUCTS = ("mm", "bmm", "addmm", "baddbmm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lever", choices=LEVERS)
    parser.add_argument("--env", default="HalfCheetah-v4", help="its sizes shape the update")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9, help="alternating timed rounds")
    parser.add_argument("--updates", type=int, default=40, help="updates per learner per round")
    parser.add_argument("--warmup", type=int, default=50, help="untimed updates per learner")
    parser.add_argument("--check", type=int, default=16, help="updates compared for equality")
    options = parser.parse_args(argv)
    counts = ("batch_size", "rounds", "updates", "warmup", "check")
    refuse_bad_counts_and_env(parser, options, counts)
    return options


class PreallocatedProducts:
    """torch as the formulation's modules see it, with each product writing into a buffer kept
    for its call site while `enabled`."""

    def __init__(self, static_sides: set[int]) -> None:
        self.static_sides = static_sides
        self.enabled = False
        self.step_parity = 0
        self.call = 0
        self.buffers: dict[tuple[int, int, tuple[int, ...]], torch.Tensor] = {}

    def __getattr__(self, name: str) -> Any:
        function = getattr(torch, name)
        if name not in PRODUCTS:
            return function

        def into_buffer(*operands: torch.Tensor) -> torch.Tensor:
            if not self.enabled:
                return function(*operands)
            self.call += 1
            left, right = operands[-2], operands[-1]
            if left.dim() == 2:
                shape: tuple[int, ...] = (left.shape[0], right.shape[1])
            else:
                shape = (max(left.shape[0], right.shape[0]), left.shape[1], right.shape[2])
            if not set(shape) <= self.static_sides:
                return function(*operands)
            key = (self.step_parity, self.call, shape)
            if key not in self.buffers:
                self.buffers[key] = torch.empty(shape, dtype=left.dtype)
            return function(*operands, out=self.buffers[key])

        return into_buffer


def traceable_relu_backward_(gradient: torch.Tensor, activation: torch.Tensor) -> torch.Tensor:
    return gradient.masked_fill_(activation <= 0, 0.0)


def traceable_relu_backward(gradient: torch.Tensor, activation: torch.Tensor) -> torch.Tensor:
    return gradient.masked_fill(activation <= 0, 0.0)


@contextmanager
def traceable_relu_backward_in_handwritten() -> Iterator[None]:
    handwritten.relu_backward_ = traceable_relu_backward_  # type: ignore[assignment]
    handwritten.relu_backward = traceable_relu_backward  # type: ignore[assignment]
    try:
        yield
    finally:
        handwritten.relu_backward_ = private_api.relu_backward_  # type: ignore[assignment]
        handwritten.relu_backward = private_api.relu_backward  # type: ignore[assignment]


class CompiledCriticStep(handwritten.HandwrittenFormulation):
    """The hand-written formulation with its critic step compiled by inductor."""

    def __init__(self) -> None:
        super().__init__(None)
        object.__setattr__(self, "compiled", torch.compile(self._critic_step, dynamic=False))

    def _critic_step(
        self, nets: Any, batch: Batch, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return super().critic_gradients(nets, batch, alpha=alpha, gamma=gamma)

    def critic_gradients(  # type: ignore[override]
        self, nets: Any, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        with traceable_relu_backward_in_handwritten():
            return self.compiled(nets, batch, alpha, gamma)


class FusedCriticStep(handwritten.HandwrittenFormulation):
    """The hand-written formulation with only its critic step computed by the fused C++."""

    def __init__(self) -> None:
        super().__init__(None)
        object.__setattr__(self, "fused", FusedFormulation.build())

    def critic_gradients(  # type: ignore[override]
        self, nets: Any, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return self.fused.critic_gradients(nets, batch, alpha=alpha, gamma=gamma)


def max_parameter_difference(first: FastLearner, second: FastLearner) -> float:
    pairs = zip(
        [*first.actor.parameters(), *first.critic.parameters()],
        [*second.actor.parameters(), *second.critic.parameters()],
        strict=True,
    )
    return max((mine - theirs).abs().max().item() for mine, theirs in pairs)


def compare_updates(options: argparse.Namespace) -> list[str]:
    spaces = env_spaces(options.env)
    obs_dim, action_dim = spaces.observation_size, spaces.action_size
    batches = random_batches(obs_dim=obs_dim, action_dim=action_dim, batch_size=options.batch_size)
    shapes = {"obs_dim": obs_dim, "action_dim": action_dim, "batch_size": options.batch_size}
    default, lever = seeded_fast_learner(**shapes), seeded_fast_learner(**shapes)
    first = LEARNING_STARTS + 2  # an even step: each round starts with actor updates
    preallocated: PreallocatedProducts | None = None
    if options.lever == "preallocated-outputs":
        preallocated = PreallocatedProducts({1, 2, options.batch_size, obs_dim, action_dim,
                                             obs_dim + action_dim, 256})  # fmt: skip
    elif options.lever == "fused-critic-step":
        lever.formulation = FusedCriticStep()
    elif options.lever == "fused-update":
        lever.formulation = FusedFormulation.build(one_call=False)
    elif options.lever == "fused-one-call":
        default.formulation = FusedFormulation.build(one_call=False)
        lever.formulation = FusedFormulation.build()
    else:
        lever.formulation = CompiledCriticStep()

    def run(learner: FastLearner, steps: range) -> None:
        if preallocated is None:
            run_updates(learner, batches, steps)
            return
        preallocated.enabled = learner is lever
        for step in steps:
            preallocated.step_parity, preallocated.call = step % 2, 0
            run_updates(learner, batches, range(step, step + 1))

    with products_through(preallocated if preallocated is not None else torch):
        compile_started = time.perf_counter()
        for learner in (default, lever):
            torch.manual_seed(3)  # the same draws for both: any difference is rounding
            run(learner, range(first, first + options.check))
        difference = max_parameter_difference(default, lever)
        setup_seconds = time.perf_counter() - compile_started
        for learner in (default, lever):
            run(learner, range(first, first + options.warmup))
        default_times, lever_times = alternating_rounds(
            default,
            lever,
            steps=range(first, first + options.updates),
            rounds=options.rounds,
            run=run,
        )
        # The levers that replace the critic step: that step alone, too.
        same_critic_step = preallocated is not None or options.lever == "fused-one-call"
        critic_step_lines = (
            [] if same_critic_step else critic_step_alone(default, lever, batches, options)
        )
    ratios = [mine / theirs for mine, theirs in zip(default_times, lever_times, strict=True)]
    used = {
        "preallocated-outputs": f"{len(preallocated.buffers) if preallocated else 0} buffers",
        "compiled-critic-step": "inductor-compiled",
        "fused-critic-step": "C++, built for this CPU",
        "fused-update": "C++, built for this CPU",
        "fused-one-call": "C++, against the fused update driven step by step",
    }[options.lever]
    return [
        f"{options.lever} ({used}), {options.env} shapes, batch {options.batch_size}, 1 thread",
        f"parameters after {options.check} updates from the same state and draws differ by at "
        f"most {difference:.2e} (first {options.check} updates of both, compilation included: "
        f"{setup_seconds:.1f} s)",
        f"ms per update: default {statistics.median(default_times):.2f}, lever "
        f"{statistics.median(lever_times):.2f} (medians of {options.rounds} alternating "
        f"rounds of {options.updates})",
        f"default / lever: {statistics.median(ratios):.3f} (median of per-round ratios; "
        f"quartiles {quartiles(ratios)})",
        *critic_step_lines,
    ]


class EagerActing:
    """A learner whose act is the eager policy's sample (what FastLearner.act ran before its fused
    form), for select_action."""

    def __init__(self, learner: FastLearner) -> None:
        self.learner = learner

    def act(self, observations: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return sample_action_fast(self.learner.actor, observations)[0]


def compare_acting(options: argparse.Namespace) -> list[str]:
    """fused-act: the eager policy's action against the C++ one, each timed in place after an
    --fused-update update, in alternating rounds."""
    spaces = env_spaces(options.env)
    obs_dim, action_dim = spaces.observation_size, spaces.action_size
    batches = random_batches(obs_dim=obs_dim, action_dim=action_dim, batch_size=options.batch_size)
    shapes = {"obs_dim": obs_dim, "action_dim": action_dim, "batch_size": options.batch_size}
    eager_learner, fused_learner = seeded_fast_learner(**shapes), seeded_fast_learner(**shapes)
    for learner in (eager_learner, fused_learner):
        learner.formulation = FusedFormulation.build()
    actors: dict[int, Any] = {id(eager_learner): EagerActing(eager_learner),
                              id(fused_learner): fused_learner}  # fmt: skip
    generator = np.random.default_rng(4)
    observations = generator.standard_normal((64, obs_dim)).astype(np.float32)
    cpu = torch.device("cpu")

    def action(learner: FastLearner, observation: np.ndarray) -> np.ndarray:
        return select_action(LEARNING_STARTS, learning_starts=LEARNING_STARTS,
                             observation=observation, learner=actors[id(learner)],
                             action_space=None, device=cpu)  # type: ignore[arg-type]  # fmt: skip

    difference = 0.0
    for observation in observations[: options.check]:
        taken = []
        for learner in (eager_learner, fused_learner):
            torch.manual_seed(5)  # the same draw: any difference is rounding
            taken.append(action(learner, observation))
        difference = max(difference, float(np.abs(taken[0] - taken[1]).max()))
    act_ms: dict[int, list[float]] = {id(eager_learner): [], id(fused_learner): []}

    def run(learner: FastLearner, steps: range) -> None:
        spent = []
        for step in steps:
            run_updates(learner, batches, range(step, step + 1))
            started = time.perf_counter()
            action(learner, observations[step % len(observations)])
            spent.append(time.perf_counter() - started)
        act_ms[id(learner)].append(statistics.median(spent) * 1e3)

    first = LEARNING_STARTS + 2
    for learner in (eager_learner, fused_learner):
        run(learner, range(first, first + options.warmup))
        act_ms[id(learner)].clear()
    steps = range(first, first + options.updates)
    step_times = alternating_rounds(
        eager_learner, fused_learner, steps=steps, rounds=options.rounds, run=run
    )
    eager_ms, fused_ms = act_ms[id(eager_learner)], act_ms[id(fused_learner)]
    ratios = [mine / theirs for mine, theirs in zip(eager_ms, fused_ms, strict=True)]
    step_ms = statistics.median(step_times[0])  # an update and the eager action
    saved_ms = statistics.median(eager_ms) - statistics.median(fused_ms)
    return [
        f"fused-act (C++, built for this CPU), {options.env} shapes, batch {options.batch_size}, "
        "1 thread, both learners updating with --fused-update",
        f"actions for {options.check} observations from the same draws differ by at most "
        f"{difference:.2e}",
        f"ms per action, right after an update: eager {statistics.median(eager_ms):.3f}, fused "
        f"{statistics.median(fused_ms):.3f} (medians of {options.rounds} alternating rounds of "
        f"{options.updates}); eager / fused: {statistics.median(ratios):.3f} (quartiles "
        f"{quartiles(ratios)})",
        f"update + eager action: {step_ms:.2f} ms; the saving, {saved_ms:.3f} ms, is "
        f"{100 * saved_ms / step_ms:.1f}% of it: {step_ms / (step_ms - saved_ms):.3f}x on the "
        "update and the action",
    ]


def critic_step_alone(
    default: FastLearner, lever: FastLearner, batches: list[Batch], options: argparse.Namespace
) -> list[str]:
    """The critic step's gradients alone (no optimizer step), timed like the updates: the part
    of the update that every formulation lever replaces."""

    def run(learner: FastLearner, steps: range) -> None:
        for step in steps:
            learner.formulation.critic_gradients(
                learner.networks, batches[step % len(batches)], alpha=learner.alpha, gamma=0.99
            )

    default_times, lever_times = alternating_rounds(
        default, lever, steps=range(options.updates), rounds=options.rounds, run=run
    )
    ratios = [mine / theirs for mine, theirs in zip(default_times, lever_times, strict=True)]
    return [
        f"critic step alone, ms: default {statistics.median(default_times):.2f}, lever "
        f"{statistics.median(lever_times):.2f}; default / lever: {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles(ratios)})",
    ]


DISPATCH_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <chrono>
// add, mul and an in-place relu, `count` times: the same ATen calls as the Python loop.
double three_ops_seconds(at::Tensor left, at::Tensor right, int64_t count) {
  auto started = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) {
    auto sum = at::add(left, right);
    auto product = at::mul(sum, right);
    sum.relu_();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}
"""

DISPATCH_SHAPES = ((1, 6), (256, 6), (256, 256), (2, 256, 256))


def python_three_ops_seconds(left: torch.Tensor, right: torch.Tensor, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        total = torch.add(left, right)
        torch.mul(total, right)
        total.relu_()
    return time.perf_counter() - started


def dispatch_cost(options: argparse.Namespace) -> list[str]:
    from torch.utils.cpp_extension import load_inline

    with tempfile.TemporaryDirectory() as build:
        started = time.perf_counter()
        extension = load_inline(
            "sacbench_dispatch_cost",
            cpp_sources=DISPATCH_SOURCE,
            functions=["three_ops_seconds"],
            build_directory=build,
            extra_cflags=["-O2"],
            no_implicit_headers=True,  # the ops it calls and pybind11 only: half the build time
        )
        built_seconds = time.perf_counter() - started
        rows: list[list[object]] = []
        for shape in DISPATCH_SHAPES:
            left, right = torch.randn(shape), torch.randn(shape)
            count = 3000 if shape[-1] < 256 else 300
            from_python, from_cpp = [], []
            for _ in range(options.rounds):
                from_python.append(python_three_ops_seconds(left, right, count) / count / 3 * 1e6)
                from_cpp.append(extension.three_ops_seconds(left, right, count) / count / 3 * 1e6)
            python_us, cpp_us = statistics.median(from_python), statistics.median(from_cpp)
            rows.append(
                [str(list(shape)), f"{python_us:.2f}", f"{cpp_us:.2f}", f"{python_us - cpp_us:.2f}"]
            )
    table = tabulate(
        rows,
        headers=["tensor", "µs per op from Python", "from C++", "Python's share"],
        tablefmt="github",
    )
    return [
        table,
        f"\nadd, mul and relu_ in a loop, medians of {options.rounds} rounds, 1 thread; the C++ "
        f"loop was built in {built_seconds:.0f} s",
    ]


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    if options.lever == "compiled-critic-step":
        private_api.eager_random_in_compiled_code()
    if options.lever == "python-dispatch":
        lines = dispatch_cost(options)
    elif options.lever == "fused-act":
        lines = compare_acting(options)
    else:
        lines = compare_updates(options)
    print("\n".join(lines))
    print(
        f"torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

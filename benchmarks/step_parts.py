"""Where one training step's time goes, and what folding the acting forward into the update's
would save.

    python benchmarks/step_parts.py [--envs HalfCheetah-v4 Humanoid-v4] [--rounds 5] [--fused]

For each task: a real env, the fast learner (`--fused`: with --fused-update; `--update-path
reference` for the other path) and a replay buffer filled by `--fill` random-action steps; then
rounds of training steps as the trainer's loop runs them, each part timed in place on one thread:
- act: the policy's action for the current observation (`select_action`, numpy out);
- env step + buffer add;
- buffer sample (256 rows, from the rows added so far, 1,000-1,600 with the defaults: a long run
  samples from up to 1M rows, whose rows the caches hold less often);
- update (the critics every step, the actor and alpha every other step, the targets).

The issue's lever "the actor forward for acting fused with the update's" would give the acting
observation a row in one of the update's 256-row policy forwards instead of a forward of its
own (the squashed sample of that row stays separate). Its ceiling is measured in the same
rounds: the policy forward of one observation where the loop runs it, right after an update
(a probe before the action on every other step, whose action time is then left out), against
what the same observation adds as a 257th row to a 256-row forward (the forward of the joined
rows, joining included, minus the batch's alone). The saving is the first minus the second; the
last column is the step time over the step time less that saving: the most a step could gain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from tabulate import tabulate

from sacbench.sac.algorithm import update_schedule
from sacbench.sac.args import Args
from sacbench.sac.learners import make_learner
from sacbench.sac.policy import policy_forward
from sacbench.training.envs import EnvError, env_spaces, make_env, step_env
from sacbench.training.loop import select_action, store_transition
from sacbench.training.replay import ReplayBuffer

PARTS = ("act", "env step + buffer add", "buffer sample", "update")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v4", "Humanoid-v4"])
    parser.add_argument("--update-path", choices=("fast", "reference"), default="fast")
    parser.add_argument(
        "--fused",
        action="store_true",
        help="the fast path with --fused-update (its update and its action in C++)",
    )
    parser.add_argument("--fill", type=int, default=1_000, help="random-action steps first")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="training steps per round (even)")
    parser.add_argument(
        "--repeats", type=int, default=200, help="forwards per side per round for the fold"
    )
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args(argv)
    for name in ("fill", "rounds", "steps", "repeats"):
        if getattr(options, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(options, name)}")
    for env_id in options.envs:
        try:
            env_spaces(env_id)
        except EnvError as error:
            parser.error(f"--envs: {error}")
    if options.fused and options.update_path != "fast":
        parser.error("--fused is the fast path's: drop --update-path reference")
    if options.steps % 2 or options.steps < 4:
        parser.error(
            "--steps must be even and at least 4 (actor updates every other step), "
            f"got {options.steps}"
        )
    return options


def milliseconds(function: Callable[[], object], repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - started) / repeats * 1e3


class Trainer:
    """The loop's parts for one task, with a clock per part."""

    def __init__(self, env_id: str, *, update_path: str, fused: bool, fill: int, seed: int) -> None:
        torch.manual_seed(seed)
        self.env = make_env(env_id, seed=seed)
        observation, _ = self.env.reset(seed=seed)
        self.observation = np.asarray(observation, dtype=np.float32)
        obs_dim = self.observation.shape[0]
        space = self.env.action_space
        self.args = Args(
            env_id=env_id, update_path=update_path, fused_update=fused, learning_starts=fill
        )
        self.learner = make_learner(
            args=self.args,
            obs_dim=obs_dim,
            action_low=space.low,
            action_high=space.high,
            device=torch.device("cpu"),
        )
        self.buffer = ReplayBuffer(
            capacity=100_000, obs_dim=obs_dim, action_dim=space.shape[0], seed=seed
        )
        self.global_step = 0
        for _ in range(fill):
            self.env_step(space.sample())
            self.global_step += 1

    def env_step(self, action: np.ndarray) -> None:
        transition = step_env(self.env, action=action)
        store_transition(
            self.buffer, observation=self.observation, action=action, transition=transition
        )
        self.observation = transition.continue_from

    def steps(self, count: int) -> tuple[dict[str, float], float]:
        """`count` training steps: milliseconds per step in each part, and of the acting
        forward where the loop runs it (right after an update, with cold caches). That forward
        is a probe run before the action on every other step; those steps' action times are
        left out, since the probe has warmed what the action reads."""
        times: dict[str, list[float]] = {part: [] for part in PARTS}
        probes: list[float] = []
        clock = time.perf_counter
        row = torch.empty(1, self.observation.shape[0])
        for index in range(count):
            probe = index % 2 == 1
            if probe:
                row.copy_(torch.as_tensor(self.observation))
                with torch.no_grad():
                    before = clock()
                    policy_forward(self.learner.actor, row)
                    probes.append(clock() - before)
            started = clock()
            action = select_action(
                self.global_step,
                learning_starts=self.args.learning_starts,
                observation=self.observation,
                learner=self.learner,
                action_space=self.env.action_space,
                device=torch.device("cpu"),
            )
            acted = clock()
            self.env_step(action)
            stepped = clock()
            batch = self.buffer.sample(self.args.batch_size)
            sampled = clock()
            schedule = update_schedule(
                self.global_step,
                learning_starts=self.args.learning_starts,
                policy_frequency=self.args.policy_frequency,
                target_network_frequency=self.args.target_network_frequency,
            )
            self.learner.update(batch, schedule)
            updated = clock()
            self.global_step += 1
            if not probe:
                times["act"].append(acted - started)
            times["env step + buffer add"].append(stepped - acted)
            times["buffer sample"].append(sampled - stepped)
            times["update"].append(updated - sampled)
        per_step = {part: statistics.fmean(seconds) * 1e3 for part, seconds in times.items()}
        return per_step, statistics.fmean(probes) * 1e3

    def extra_row(self, repeats: int) -> float:
        """Milliseconds that one observation adds as a 257th row to a 256-row policy forward
        (the forward of the joined rows, joining included, minus the batch's alone)."""
        actor = self.learner.actor
        row = torch.as_tensor(self.observation)[None]
        batch = self.buffer.sample(self.args.batch_size).observations
        with torch.no_grad():
            joined = milliseconds(lambda: policy_forward(actor, torch.cat([batch, row])), repeats)
            batch_only = milliseconds(lambda: policy_forward(actor, batch), repeats)
        return joined - batch_only


def measure(env_id: str, options: argparse.Namespace) -> list[list[object]]:
    trainer = Trainer(
        env_id,
        update_path=options.update_path,
        fused=options.fused,
        fill=options.fill,
        seed=options.seed,
    )
    trainer.steps(options.steps)  # warm-up: the first updates allocate
    per_round: dict[str, list[float]] = {part: [] for part in PARTS}
    alone_ms: list[float] = []
    extra_ms: list[float] = []
    ceilings: list[float] = []
    for _ in range(options.rounds):
        times, alone = trainer.steps(options.steps)
        for part in PARTS:
            per_round[part].append(times[part])
        extra = trainer.extra_row(options.repeats)
        alone_ms.append(alone)
        extra_ms.append(extra)
        step = sum(times.values())
        ceilings.append(step / (step - (alone - extra)))
    medians = {part: statistics.median(values) for part, values in per_round.items()}
    step_ms = sum(medians.values())
    rows: list[list[object]] = [
        [env_id, part, f"{ms:.3f}", f"{100 * ms / step_ms:.1f}%"] for part, ms in medians.items()
    ]
    rows.append([env_id, "whole step", f"{step_ms:.3f}", "100%"])
    saving = statistics.median(alone_ms) - statistics.median(extra_ms)
    rows.append(
        [
            env_id,
            f"fold: acting forward {statistics.median(alone_ms):.3f} ms, as a 257th row "
            f"{statistics.median(extra_ms):.3f} ms",
            f"{saving:.3f} saved",
            f"{statistics.median(ceilings):.3f}x ceiling",
        ]
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    rows: list[list[object]] = []
    for env_id in options.envs:
        rows.extend(measure(env_id, options))
    print(tabulate(rows, headers=["env", "part", "ms / step", "share"], tablefmt="github"))
    load = os.getloadavg()[0]
    print(
        f"\n{options.update_path} path{' with --fused-update' * options.fused}, batch 256, "
        f"1 thread, {options.rounds} rounds x "
        f"{options.steps} training steps (medians), torch {torch.__version__}, load average "
        f"{load:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py.

Same defaults, update schedule, TensorBoard tags and SPS definition as CleanRL; unlike it, every
piece is an importable function, and a run can be killed and resumed without losing or repeating
a step. Read top to bottom:

1. networks and the squashed Gaussian policy;
2. the SAC losses as pure functions of tensors;
3. the reference update path (CleanRL's computation, literally) - the fast path, with the same
   mathematics, lives in sacbench/fast.py;
4. the training loop, with checkpoints and the event log;
5. the command line: `python -m sacbench.train --help`.
"""

from __future__ import annotations

import random
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

from sacbench.args import Args, run_defining_args, validate_args
from sacbench.envs import (
    capture_env_state,
    check_env_id,
    float32_observation,
    make_env,
    restore_env_state,
)
from sacbench.progress import PROGRESS_FILE_NAME, RunProgress
from sacbench.replay import Batch, ReplayBuffer
from sacbench.run_dir import RunDir, RunDirError
from sacbench.tags import (
    ELAPSED_TAG,
    HYPERPARAMETERS_TAG,
    LENGTH_TAG,
    RETURN_TAG,
    SPS_TAG,
    STEADY_SPS_TAG,
    loss_tag,
)

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
LOG_EVERY = 100  # CleanRL writes losses and SPS every 100 steps once training has started


# ==== 1. Networks ================================================================================


class SoftQNetwork(nn.Module):
    """Q(s, a): concat -> 256 -> ReLU -> 256 -> ReLU -> 1."""

    def __init__(self, *, obs_dim: int, action_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + action_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observations, actions], dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    """256 -> ReLU -> 256 -> ReLU -> (mean, log_std) of a tanh-squashed Gaussian."""

    def __init__(self, *, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray) -> None:
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, action_dim)
        self.fc_logstd = nn.Linear(256, action_dim)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        low = torch.as_tensor(action_low, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc1(observations))
        x = F.relu(self.fc2(x))
        return self.fc_mean(x), squash_log_std(self.fc_logstd(x))


def squash_log_std(raw: torch.Tensor) -> torch.Tensor:
    """Map an unbounded head output into [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's formula)."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)


def sample_action(
    actor: Actor, observations: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(action, log_prob [B, 1], deterministic action), rescaled to the action bounds.

    The log-probability includes the tanh change of variables,
    log(action_scale * (1 - tanh(x)^2) + 1e-6), summed over action dimensions.
    """
    mean, log_std = actor(observations)
    normal = torch.distributions.Normal(mean, log_std.exp())
    x_t = normal.rsample()  # reparameterised: gradients flow to mean and log_std
    y_t = torch.tanh(x_t)
    action = y_t * actor.action_scale + actor.action_bias
    log_prob = normal.log_prob(x_t)
    log_prob = log_prob - torch.log(actor.action_scale * (1 - y_t.pow(2)) + 1e-6)
    log_prob = log_prob.sum(1, keepdim=True)
    deterministic = torch.tanh(mean) * actor.action_scale + actor.action_bias
    return action, log_prob, deterministic


# ==== 2. Losses (pure functions) ================================================================


def soft_q_target(
    *,
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_pi: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log_pi'), all shaped [B].

    Only termination stops bootstrapping: a time-limit truncation still bootstraps from the true
    final observation, which the buffer stores.
    """
    min_next_q = torch.minimum(next_q1, next_q2) - alpha * next_log_pi
    return rewards + (1 - terminations) * gamma * min_next_q


def critic_losses(
    q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return F.mse_loss(q1, target), F.mse_loss(q2, target)


def actor_loss_fn(
    *, alpha: torch.Tensor | float, log_pi: torch.Tensor, min_q_pi: torch.Tensor
) -> torch.Tensor:
    return (alpha * log_pi - min_q_pi).mean()


def alpha_loss_fn(
    *, log_alpha: torch.Tensor, log_pi: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """Temperature loss; log_pi must come from the actor *after* its update, without gradient."""
    return (-log_alpha.exp() * (log_pi + target_entropy)).mean()


@torch.no_grad()
def polyak_update(
    target_parameters: Iterator[torch.Tensor] | list[torch.Tensor],
    parameters: Iterator[torch.Tensor] | list[torch.Tensor],
    *,
    tau: float,
) -> None:
    """target <- tau * online + (1 - tau) * target."""
    for target, online in zip(target_parameters, parameters, strict=True):
        target.data.copy_(tau * online.data + (1 - tau) * target.data)


# ==== 3. Update paths ===========================================================================


@dataclass(frozen=True)
class UpdateSchedule:
    """Which updates step `global_step` performs (CleanRL's schedule)."""

    train: bool  # global_step > learning_starts: one critic update
    actor_updates: int  # policy_frequency actor (+alpha) updates every policy_frequency steps
    target_update: bool  # every target_network_frequency steps
    log: bool  # every LOG_EVERY steps once training has started


def update_schedule(
    global_step: int, *, learning_starts: int, policy_frequency: int, target_network_frequency: int
) -> UpdateSchedule:
    train = global_step > learning_starts
    return UpdateSchedule(
        train=train,
        actor_updates=policy_frequency if train and global_step % policy_frequency == 0 else 0,
        target_update=train and global_step % target_network_frequency == 0,
        log=train and global_step % LOG_EVERY == 0,
    )


class Learner(Protocol):
    """What the loop needs from an update path."""

    def act(self, observations: torch.Tensor) -> torch.Tensor: ...

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ReferenceLearner:
    """CleanRL's per-step computation, literally: two critic modules, per-parameter Adam, a
    separate no-grad actor forward for the alpha loss, alpha read back with .item()."""

    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        args: Args,
        device: torch.device,
    ) -> None:
        action_dim = len(action_low)
        self.args = args
        self.actor = Actor(obs_dim=obs_dim, action_low=action_low, action_high=action_high).to(
            device
        )
        self.qf1 = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf2 = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf1_target = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf2_target = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.q_optimizer = torch.optim.Adam(
            list(self.qf1.parameters()) + list(self.qf2.parameters()), lr=args.q_lr
        )
        self.actor_optimizer = torch.optim.Adam(list(self.actor.parameters()), lr=args.policy_lr)
        self.target_entropy = -float(action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=args.q_lr)
        self.alpha = self.log_alpha.exp().item() if args.autotune else args.alpha
        self.last: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def act(self, observations: torch.Tensor) -> torch.Tensor:
        action, _, _ = sample_action(self.actor, observations)
        return action

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        args = self.args
        with torch.no_grad():
            next_actions, next_log_pi, _ = sample_action(self.actor, batch.next_observations)
            next_q1 = self.qf1_target(batch.next_observations, next_actions).view(-1)
            next_q2 = self.qf2_target(batch.next_observations, next_actions).view(-1)
            target = soft_q_target(
                rewards=batch.rewards,
                terminations=batch.terminations,
                next_q1=next_q1,
                next_q2=next_q2,
                next_log_pi=next_log_pi.view(-1),
                alpha=self.alpha,
                gamma=args.gamma,
            )
        q1 = self.qf1(batch.observations, batch.actions).view(-1)
        q2 = self.qf2(batch.observations, batch.actions).view(-1)
        qf1_loss, qf2_loss = critic_losses(q1, q2, target)
        qf_loss = qf1_loss + qf2_loss
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.last.update(
            qf1_values=q1.mean().detach(),
            qf2_values=q2.mean().detach(),
            qf1_loss=qf1_loss.detach(),
            qf2_loss=qf2_loss.detach(),
            qf_loss=qf_loss.detach() / 2.0,
        )

        for _ in range(schedule.actor_updates):
            pi, log_pi, _ = sample_action(self.actor, batch.observations)
            min_q_pi = torch.min(self.qf1(batch.observations, pi), self.qf2(batch.observations, pi))
            actor_loss = actor_loss_fn(alpha=self.alpha, log_pi=log_pi, min_q_pi=min_q_pi)
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self.last["actor_loss"] = actor_loss.detach()
            if args.autotune:
                with torch.no_grad():
                    _, log_pi, _ = sample_action(self.actor, batch.observations)
                alpha_loss = alpha_loss_fn(
                    log_alpha=self.log_alpha, log_pi=log_pi, target_entropy=self.target_entropy
                )
                self.alpha_optimizer.zero_grad()
                alpha_loss.backward()
                self.alpha_optimizer.step()
                self.alpha = self.log_alpha.exp().item()
                self.last["alpha_loss"] = alpha_loss.detach()

        if schedule.target_update:
            polyak_update(self.qf1_target.parameters(), self.qf1.parameters(), tau=args.tau)
            polyak_update(self.qf2_target.parameters(), self.qf2.parameters(), tau=args.tau)
        self.last["alpha"] = torch.tensor(self.alpha)
        return self.last

    def state_dict(self) -> dict[str, Any]:
        return {
            "path": "reference",
            "actor": self.actor.state_dict(),
            "qf1": self.qf1.state_dict(),
            "qf2": self.qf2.state_dict(),
            "qf1_target": self.qf1_target.state_dict(),
            "qf2_target": self.qf2_target.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "alpha": self.alpha,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"):
            getattr(self, name).load_state_dict(state[name])
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.alpha = state["alpha"]
        self.last = dict(state["last"])


def make_learner(
    *,
    args: Args,
    obs_dim: int,
    action_low: np.ndarray,
    action_high: np.ndarray,
    device: torch.device,
) -> Learner:
    if args.update_path == "reference":
        return ReferenceLearner(
            obs_dim=obs_dim,
            action_low=action_low,
            action_high=action_high,
            args=args,
            device=device,
        )
    from sacbench.fast import FastLearner

    return FastLearner(
        obs_dim=obs_dim, action_low=action_low, action_high=action_high, args=args, device=device
    )


# ==== 4. Training loop ==========================================================================


@dataclass(frozen=True)
class Transition:
    next_observation: np.ndarray  # what the buffer stores: the true next (or final) observation
    reward: float
    terminated: bool  # stops bootstrapping; a time-limit truncation does not
    episode_over: bool  # terminated or truncated
    continue_from: np.ndarray  # the observation the next step acts on (a reset one after an end)


def step_env(env: gym.Env, *, action: np.ndarray) -> Transition:
    """One environment step; a finished episode is reset after its final observation is kept."""
    next_observation, reward, terminated, truncated, _ = env.step(action)
    next_observation = float32_observation(next_observation)
    episode_over = bool(terminated or truncated)
    continue_from = next_observation
    if episode_over:
        reset_observation, _ = env.reset()
        continue_from = float32_observation(reset_observation)
    return Transition(
        next_observation=next_observation,
        reward=float(reward),
        terminated=bool(terminated),
        episode_over=episode_over,
        continue_from=continue_from,
    )


def resolve_device(args: Args) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    use_cuda = args.device == "cuda" or (
        args.device == "auto" and args.cuda and torch.cuda.is_available()
    )
    return torch.device("cuda" if use_cuda else "cpu")


def seed_everything(seed: int, *, torch_deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class StopRequested:
    """Records SIGTERM/SIGUSR1/SIGINT; the loop checkpoints at the end of the current step."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequested:
        for signal_number in self.SIGNALS:
            self._previous[signal_number] = signal.signal(signal_number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signal_number, handler in self._previous.items():
            signal.signal(signal_number, handler)

    def _handle(self, signal_number: int, frame: object) -> None:
        self.signal_number = signal_number

    @property
    def requested(self) -> bool:
        return self.signal_number is not None


def train(args: Args) -> int:
    """Train (or resume) the run in args.run_dir; return the process exit status."""
    problems = validate_args(args)
    if problems:
        raise ValueError("invalid arguments:\n  " + "\n  ".join(problems))
    check_env_id(args.env_id)
    if args.learning_starts >= args.total_timesteps:
        warnings.warn(
            f"--learning-starts {args.learning_starts} >= --total-timesteps "
            f"{args.total_timesteps}: no training update will run",
            stacklevel=2,
        )
    run_dir = RunDir(Path(args.run_dir))
    if not run_dir.differing_args(run_defining_args(args)):
        finished = run_dir.finished_record(total_timesteps=args.total_timesteps)
        if finished is not None:
            # Session settings (threads, device, checkpoint interval) do not change what a run
            # computes: a finished run is never trained again for them, nor because its
            # completion record was removed (Snakemake removes it before rerunning a job).
            restored = not run_dir.is_complete()
            run_dir.restore_completion(finished)
            print(
                f"{run_dir.path} holds a run that finished all {args.total_timesteps} steps "
                f"(at {finished['finished_at']}); nothing to do"
                + ("; its completion record was restored" if restored else "")
                + f". To train it again from scratch, move {run_dir.path} away first."
            )
            return 0
    env = make_env(args.env_id, seed=args.seed)  # refuses a non-Box task before any file is made
    device = resolve_device(args)
    checkpoint = run_dir.prepare(run_defining_args(args), overwrite=args.overwrite)

    torch.set_num_threads(args.threads)
    seed_everything(args.seed, torch_deterministic=args.torch_deterministic)
    obs_dim = int(np.prod(env.observation_space.shape))
    action_space = env.action_space
    assert isinstance(action_space, gym.spaces.Box)
    learner = make_learner(
        args=args,
        obs_dim=obs_dim,
        action_low=action_space.low,
        action_high=action_space.high,
        device=device,
    )
    buffer = ReplayBuffer(
        capacity=args.buffer_size,
        obs_dim=obs_dim,
        action_dim=action_space.shape[0],
        seed=args.seed,
        device=str(device),
    )

    if checkpoint is None:
        start_step, elapsed_before = 0, 0.0
        start_time = time.time()  # before the first reset, as CleanRL
        observation, _ = env.reset(seed=args.seed)
        episode_return, episode_length = 0.0, 0
        event_files: list[dict[str, Any]] = []
    else:
        start_step = checkpoint["global_step"]
        elapsed_before = checkpoint["elapsed_seconds"]
        start_time = time.time() - elapsed_before
        learner.load_state_dict(checkpoint["learner"])
        run_dir.load_buffer(buffer, checkpoint)
        buffer.rng.bit_generator.state = checkpoint["buffer_rng"]
        # Satisfies the wrappers' reset-before-step check; the state is then overwritten.
        env.reset(seed=args.seed)
        restore_env_state(env, checkpoint["env"])
        restore_rng_states(checkpoint["rng"])
        observation = checkpoint["observation"]
        episode_return = checkpoint["episode_return"]
        episode_length = checkpoint["episode_length"]
        event_files = checkpoint["event_files"]
        run_dir.trim_event_files(event_files)

    progress = RunProgress(
        path=run_dir.path / PROGRESS_FILE_NAME,
        total_timesteps=args.total_timesteps,
        learning_starts=args.learning_starts,
        start_step=start_step,
        saved=None if checkpoint is None else checkpoint.get("progress"),
    )
    run_dir.begin_session(args=args, device=str(device), start_step=start_step)
    try:
        exit_code, exit_status, end_step, elapsed_total = _training_session(
            args=args,
            run_dir=run_dir,
            env=env,
            learner=learner,
            buffer=buffer,
            device=device,
            start_step=start_step,
            start_time=start_time,
            observation=observation,
            episode_return=episode_return,
            episode_length=episode_length,
            event_files=event_files,
            progress=progress,
        )
    except BaseException as error:
        progress.write_failed(elapsed_seconds=time.time() - start_time)
        run_dir.end_session(exit_status=f"error: {type(error).__name__}: {error}", end_step=None)
        raise
    if exit_code == 0:
        run_dir.finish(
            {"learner": learner.state_dict(), "buffer": {"added": buffer.added}},
            global_step=args.total_timesteps,
            elapsed_seconds=elapsed_total,
        )
    progress.write(
        state="completed" if exit_code == 0 else "stopped",
        global_step=end_step,
        elapsed_seconds=elapsed_total,
    )
    run_dir.end_session(exit_status=exit_status, end_step=end_step)
    return exit_code


def _training_session(
    *,
    args: Args,
    run_dir: RunDir,
    env: gym.Env,
    learner: Learner,
    buffer: ReplayBuffer,
    device: torch.device,
    start_step: int,
    start_time: float,
    observation: np.ndarray,
    episode_return: float,
    episode_length: int,
    event_files: list[dict[str, Any]],
    progress: RunProgress,
) -> tuple[int, str, int, float]:
    """Steps start_step.. until the end or a stop signal; (exit code, status, end step, elapsed)."""
    action_space = env.action_space
    writer, event_file_name = run_dir.open_writer()
    event_files = [*event_files, {"name": event_file_name, "size": 0}]
    if start_step == 0:
        writer.add_text(
            HYPERPARAMETERS_TAG,
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{key}|{value}|" for key, value in vars(args).items()),
        )

    observation = float32_observation(observation)
    # steady_SPS windows count the steps done since the previous log point (window_step is the
    # last step before the window), in this session, from the first training step on.
    window_step, window_time = start_step - 1, time.time()
    last_log_step = -1
    exit_status, exit_code = "completed", 0
    global_step = start_step
    progress.write(global_step=start_step, elapsed_seconds=time.time() - start_time)
    with StopRequested() as stop:
        for global_step in range(start_step, args.total_timesteps):
            if global_step == args.learning_starts + 1:
                window_step, window_time = global_step - 1, time.time()
            if global_step < args.learning_starts:
                action = action_space.sample()
            else:
                action_tensor = learner.act(torch.as_tensor(observation, device=device)[None])
                action = action_tensor[0].cpu().numpy()

            transition = step_env(env, action=action)
            buffer.add(
                observation=observation,
                next_observation=transition.next_observation,
                action=action,
                reward=transition.reward,
                terminated=transition.terminated,
            )
            episode_return += transition.reward
            episode_length += 1
            observation = transition.continue_from
            if transition.episode_over:
                writer.add_scalar(RETURN_TAG, episode_return, global_step)
                writer.add_scalar(LENGTH_TAG, episode_length, global_step)
                print(f"global_step={global_step}, episodic_return={episode_return}", flush=True)
                progress.record_episode(episodic_return=episode_return)
                episode_return, episode_length = 0.0, 0

            schedule = update_schedule(
                global_step,
                learning_starts=args.learning_starts,
                policy_frequency=args.policy_frequency,
                target_network_frequency=args.target_network_frequency,
            )
            if schedule.train:
                metrics = learner.update(buffer.sample(args.batch_size), schedule)
                if schedule.log:
                    now = time.time()
                    for name, value in metrics.items():
                        writer.add_scalar(loss_tag(name), value.item(), global_step)
                    elapsed = now - start_time
                    writer.add_scalar(SPS_TAG, int(global_step / elapsed), global_step)
                    writer.add_scalar(
                        STEADY_SPS_TAG,
                        (global_step - window_step) / max(now - window_time, 1e-9),
                        global_step,
                    )
                    writer.add_scalar(ELAPSED_TAG, elapsed, global_step)
                    window_step, window_time = global_step, now
                    last_log_step = global_step
                    print(
                        f"global_step={global_step}, SPS={int(global_step / elapsed)}", flush=True
                    )

            finished_steps = global_step + 1
            periodic = (
                args.checkpoint_interval > 0 and finished_steps % args.checkpoint_interval == 0
            )
            if (periodic or stop.requested) and finished_steps < args.total_timesteps:
                checkpoint_started = time.time()
                event_files = save_checkpoint(
                    run_dir=run_dir,
                    writer=writer,
                    event_files=event_files,
                    global_step=finished_steps,
                    elapsed_seconds=time.time() - start_time,
                    learner=learner,
                    buffer=buffer,
                    env=env,
                    observation=observation,
                    episode_return=episode_return,
                    episode_length=episode_length,
                    progress=progress,
                )
                # Keep steady_SPS about training: the pause for the checkpoint is not counted.
                window_time += time.time() - checkpoint_started
            if stop.requested and finished_steps < args.total_timesteps:
                assert stop.signal_number is not None
                name = signal.Signals(stop.signal_number).name
                print(f"{name} received: checkpointed at step {finished_steps}; rerun to resume")
                exit_status, exit_code = f"signal {name}", 128 + stop.signal_number
                break
            # In the random-action phase too: watchers see a run move from its first steps on.
            if finished_steps % LOG_EVERY == 0 and finished_steps < args.total_timesteps:
                progress.update(
                    global_step=finished_steps, elapsed_seconds=time.time() - start_time
                )

        elapsed_total = time.time() - start_time
        # The last step's elapsed time, unless the log cadence has just written it.
        if exit_code == 0 and last_log_step != args.total_timesteps - 1:
            writer.add_scalar(ELAPSED_TAG, elapsed_total, args.total_timesteps - 1)
        writer.close()
        env.close()
    return exit_code, exit_status, global_step + 1, elapsed_total


def save_checkpoint(
    *,
    run_dir: RunDir,
    writer: SummaryWriter,
    event_files: list[dict[str, Any]],
    global_step: int,
    elapsed_seconds: float,
    learner: Learner,
    buffer: ReplayBuffer,
    env: gym.Env,
    observation: np.ndarray,
    episode_return: float,
    episode_length: int,
    progress: RunProgress,
) -> list[dict[str, Any]]:
    writer.flush()
    event_files = run_dir.record_event_offsets(event_files)
    run_dir.save_checkpoint(
        {
            "global_step": global_step,
            "elapsed_seconds": elapsed_seconds,
            "learner": learner.state_dict(),
            "buffer_rng": buffer.rng.bit_generator.state,
            "env": capture_env_state(env),
            "rng": rng_states(),
            "observation": observation,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "event_files": event_files,
            "progress": progress.checkpoint_state(),
        },
        buffer=buffer,
    )
    progress.record_checkpoint(global_step=global_step)
    return event_files


# ==== 5. Command line ===========================================================================


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(
        Args, args=argv, prog="python -m sacbench.train", description=__doc__.split("\n\n")[0]
    )
    try:
        return train(args)
    except (RunDirError, ValueError, RuntimeError) as error:
        print(f"sacbench.train: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py.

Same defaults, update schedule, TensorBoard tags and SPS definition as CleanRL; unlike it, every
piece is an importable function, and a run can be killed and resumed without losing or repeating
a step. The SAC mathematics and the two update paths live in sacbench.sac (start at
sacbench/sac/algorithm.py); this module holds:

1. the training loop, with checkpoints and the event log;
2. the command line: `python -m sacbench.train --help`.
"""

from __future__ import annotations

import random
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter

from sacbench.envs import (
    capture_env_state,
    check_env_id,
    float32_observation,
    make_env,
    restore_env_state,
)
from sacbench.progress import PROGRESS_FILE_NAME, RunProgress
from sacbench.replay import ReplayBuffer
from sacbench.run_dir import RunDir, RunDirError
from sacbench.sac.algorithm import LOG_EVERY, update_schedule
from sacbench.sac.args import Args, run_defining_args, validate_args
from sacbench.sac.learners import Learner, make_learner
from sacbench.tags import (
    ELAPSED_TAG,
    HYPERPARAMETERS_TAG,
    LENGTH_TAG,
    RETURN_TAG,
    SPS_TAG,
    STEADY_SPS_TAG,
    loss_tag,
)

# ==== 1. Training loop ==========================================================================


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


# ==== 2. Command line ===========================================================================


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

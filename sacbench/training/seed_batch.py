"""Several seeds of one task trained in one process, every update of all seeds one computation.

`train_seed_batch` trains the seeds of one set of arguments side by side. Each seed keeps what a
run trained alone keeps, in the same formats: its env, replay buffer, run dir, event file,
progress, checkpoint and completion record. What the seeds share is the arithmetic: each step's
updates of all seeds are one `BatchedLearner` step (sacbench.sac.batched), and each action one
batched actor forward. Seed s draws from a generator of its own, started where seed s alone
starts drawing from torch's default generator, so it trains as it would alone, up to the
rounding of the fast path's autograd formulation (tests/test_seed_batch.py). A seed's
checkpoint is an ordinary run's: the batch resumes it, and so does `python -m sacbench.train`.

What it is for: a step's per-operation cost is paid once for all seeds, which is what bounds a
small network's step on a GPU. On one CPU thread the products dominate and it is not faster
per seed (docs/performance.md, "Batched seeds").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sacbench.sac.args import Args, run_defining_args
from sacbench.sac.batched import BatchedLearner, stack_batches
from sacbench.sac.fast_learner import FastLearner
from sacbench.training.envs import float32_observation, make_env
from sacbench.training.errors import RunDirError
from sacbench.training.event_log import EventLog, SteadyWindow
from sacbench.training.loop import (
    build_learner_and_buffer,
    check_arguments,
    checkpoint_due,
    finished_run,
    log_update,
    record_end,
    record_env_step,
    report_progress,
    resolve_device,
    run_progress,
    scheduled_updates,
    stop_status,
)
from sacbench.training.rng import rng_states, seed_everything
from sacbench.training.run_dir import RunDir, describe_differences
from sacbench.training.session import Session, capture_checkpoint, fresh_state, resume_state
from sacbench.training.signals import StopRequested

SEED_FIELD = "{seed}"

# Options a seed batch does not run: the one value it takes, and the reason its error gives.
NO_EVALUATION = (
    "a seed batch runs no evaluation; evaluate its runs' saved policies "
    "(--save-model, python -m sacbench.evaluate)"
)
ONLY: dict[str, tuple[object, str]] = {
    "update_path": ("fast", "a seed batch computes the fast path (sacbench.sac.batched); train "
                    "--update-path reference runs alone"),
    "precision": ("fp32", "a seed batch computes in float32; train --precision bf16 runs alone"),
    "compile": (False, "a seed batch is not compiled"),
    "cudagraphs": (False, "a seed batch is not captured in CUDA graphs"),
    "eval_frequency": (0, NO_EVALUATION),
    "eval_episodes": (0, NO_EVALUATION),
    "capture_video": (False, "a seed batch films nothing; film its runs' saved policies "
                      "(--save-model, python -m sacbench.evaluate)"),
    "track": (False, "a seed batch does not sync to W&B"),
}  # fmt: skip


def seed_runs_args(args: Args, seeds: Sequence[int]) -> list[Args]:
    """Each seed's own trainer arguments (what `python -m sacbench.train` would get for it);
    reject a batch it cannot train, naming the flag, before any file is touched."""
    problems = [
        f"--{name.replace('_', '-')} {getattr(args, name)!r}: {why}"
        for name, (only, why) in ONLY.items()
        if getattr(args, name) != only
    ]
    if not seeds:
        problems.append("--seeds: give at least one seed")
    if len(set(seeds)) != len(seeds):
        problems.append(f"--seeds {' '.join(map(str, seeds))}: each seed at most once")
    if SEED_FIELD not in args.run_dir:
        problems.append(
            f"--run-dir {args.run_dir!r}: needs {SEED_FIELD}, which stands for each seed, "
            "so that every seed gets a run dir of its own"
        )
    if problems:
        raise ValueError("invalid arguments for a seed batch:\n  " + "\n  ".join(problems))
    plain = {field.name: getattr(args, field.name) for field in dataclasses.fields(Args)}
    runs = [
        Args(**{**plain, "seed": seed, "run_dir": args.run_dir.replace(SEED_FIELD, str(seed))})
        for seed in seeds
    ]
    for run_args in runs:
        check_arguments(run_args)
    return runs


class SeedDraws:
    """One seed's random state in a batch: the generator its updates and actions draw from, and
    the process-wide states that seed alone would have, which its checkpoint records.

    Made right after the seed's learner is built or resumed, when the process's generators hold
    that seed's states; its torch generator takes over from the default one of the device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.states = rng_states()
        self.generator = torch.Generator(device=device)
        if device.type == "cuda":
            self.generator.set_state(torch.cuda.get_rng_state(device))
        else:
            self.generator.set_state(self.states["torch"])

    def checkpoint_states(self) -> dict[str, Any]:
        """rng_states()'s format, with this seed's draws where its run alone keeps them."""
        states = dict(self.states)
        if self.device.type == "cuda":
            index = self.device.index
            if index is None:
                index = torch.cuda.current_device()
            cuda_states = list(states["cuda"])
            cuda_states[index] = self.generator.get_state()
            states["cuda"] = cuda_states
        else:
            states["torch"] = self.generator.get_state()
        return states


@dataclass
class SeedBatch:
    """The objects one seed-batch process trains with: one Session per seed, plus the shared
    learner (seed i's networks at index i) and each seed's draws."""

    sessions: list[Session]
    draws: list[SeedDraws]
    learner: BatchedLearner

    @property
    def args(self) -> Args:
        """The arguments the seeds share (the first seed's; only seed and run dir differ)."""
        return self.sessions[0].args

    def labels(self) -> list[str]:
        return [f"seed={session.args.seed} " for session in self.sessions]

    def sync_seed_learners(self) -> None:
        """Bring each seed's own FastLearner (what checkpoints and final policies read) to the
        batch's state of that seed."""
        for index, session in enumerate(self.sessions):
            session.learner.load_state_dict(self.learner.seed_state_dict(index))


def train_seed_batch(args: Args, seeds: Sequence[int]) -> int:
    """Train (or resume) `seeds` together, each in args.run_dir with {seed} filled in; return
    the process's exit status."""
    runs = [(run_args, RunDir(Path(run_args.run_dir))) for run_args in seed_runs_args(args, seeds)]
    unfinished = [
        (run_args, run_dir) for run_args, run_dir in runs if not finished_run(run_dir, run_args)
    ]
    if not unfinished:
        return 0
    _check_runs_can_share_a_batch(unfinished)
    device = resolve_device(args)
    torch.set_num_threads(args.threads)
    sessions, draws = [], []
    for run_args, run_dir in unfinished:
        session, seed_draws = _seed_session(run_args, run_dir, device)
        sessions.append(session)
        draws.append(seed_draws)
    batch = SeedBatch(
        sessions=sessions,
        draws=draws,
        learner=BatchedLearner(
            learners=[_fast_learner(session) for session in sessions],
            generators=[seed_draws.generator for seed_draws in draws],
        ),
    )
    batch_seeds = [session.args.seed for session in sessions]
    for session in sessions:
        session.run_dir.begin_session(
            args=session.args,
            device=str(device),
            start_step=session.state.step,
            seed_batch=batch_seeds,
        )
    try:
        exit_code, exit_status, end_step, elapsed = _batch_session(batch)
    except BaseException as error:
        for session in sessions:
            session.progress.write_failed(elapsed_seconds=time.time() - session.state.start_time)
            session.run_dir.end_session(
                exit_status=f"error: {type(error).__name__}: {error}", end_step=None
            )
        raise
    batch.sync_seed_learners()
    for session, seed_elapsed in zip(sessions, elapsed, strict=True):
        record_end(session, exit_code, exit_status, end_step, seed_elapsed)
    return exit_code


def _check_runs_can_share_a_batch(runs: list[tuple[Args, RunDir]]) -> None:
    """Refuse, before any run dir changes, seeds whose run dirs hold other arguments or stand
    at different steps (a run can only go on from where its checkpoint stands)."""
    steps: dict[int, int] = {}
    for run_args, run_dir in runs:
        differing = run_dir.differing_args(run_defining_args(run_args))
        if differing and not run_args.overwrite:
            raise RunDirError(
                f"{run_dir.metadata_path} holds a run with different args "
                f"({describe_differences(differing)}); use another --run-dir, or --overwrite "
                "to move it aside"
            )
        resumes = run_dir.state_path.exists() and not differing  # --overwrite starts afresh
        steps[run_args.seed] = run_dir.load_checkpoint()["global_step"] if resumes else 0
    if len(set(steps.values())) > 1:
        standing = ", ".join(
            f"seed {run_args.seed} at step {steps[run_args.seed]} ({run_dir.path})"
            for run_args, run_dir in runs
        )
        raise RunDirError(
            f"the seeds' run dirs stand at different steps ({standing}); a seed batch trains "
            "seeds that stand at the same step. Resume a seed alone with python -m "
            "sacbench.train and the same arguments, its --seed and its --run-dir"
        )


def _seed_session(
    run_args: Args, run_dir: RunDir, device: torch.device
) -> tuple[Session, SeedDraws]:
    """One seed's run prepared as `train` prepares a run alone, and its draws."""
    env = make_env(run_args.env_id, seed=run_args.seed)
    checkpoint = run_dir.prepare(run_defining_args(run_args), overwrite=run_args.overwrite)
    seed_everything(run_args.seed, torch_deterministic=run_args.torch_deterministic)
    # The batch computes the autograd formulation (sacbench.sac.batched) whatever --fused-update
    # says; each seed's own learner holds its state for checkpoints and the final policy.
    learner, buffer = build_learner_and_buffer(run_args, env, device, gradients="handwritten")
    if checkpoint is None:
        state = fresh_state(env, seed=run_args.seed)
    else:
        state = resume_state(
            checkpoint,
            seed=run_args.seed,
            env=env,
            learner=learner,
            buffer=buffer,
            run_dir=run_dir,
        )
    seed_draws = SeedDraws(device)
    progress = run_progress(run_dir, run_args, state, checkpoint)
    session = Session(run_args, run_dir, env, learner, buffer, device, progress, state)
    return session, seed_draws


def _fast_learner(session: Session) -> FastLearner:
    assert isinstance(session.learner, FastLearner)  # seed_runs_args admits the fast path only
    return session.learner


def _batch_session(batch: SeedBatch) -> tuple[int, str, int, list[float]]:
    """`_training_session` for a batch: (exit code, status, end step, each seed's elapsed)."""
    args, sessions, labels = batch.args, batch.sessions, batch.labels()
    event_logs = [EventLog(*session.run_dir.open_writer()) for session in sessions]
    for session, event_log in zip(sessions, event_logs, strict=True):
        state = session.state
        state.event_files = [*state.event_files, {"name": event_log.file_name, "size": 0}]
        if state.step == 0:
            event_log.hyperparameters(session.args)
        state.observation = float32_observation(state.observation)
        session.progress.write(
            global_step=state.step, elapsed_seconds=time.time() - state.start_time
        )
    first_step = sessions[0].state.step
    window = SteadyWindow(step=first_step - 1, time=time.time())
    last_log_step, global_step = -1, first_step
    exit_status, exit_code = "completed", 0
    with StopRequested() as stop:
        for global_step in range(first_step, args.total_timesteps):
            if global_step == args.learning_starts + 1:
                window.restart(global_step - 1, time.time())
            actions = _batch_actions(batch, global_step)
            for session, event_log, action, label in zip(
                sessions, event_logs, actions, labels, strict=True
            ):
                record_env_step(session, event_log, global_step, action, label=label)
            if _batch_train_step(batch, event_logs, window, global_step):
                last_log_step = global_step
            finished_steps = global_step + 1
            _maybe_checkpoint_batch(batch, event_logs, window, stop, finished_steps)
            stopped = stop_status(stop, finished_steps, args.total_timesteps)
            if stopped is not None:
                exit_status, exit_code = stopped
                break
            for session in sessions:
                report_progress(session, finished_steps)
        now = time.time()
        elapsed = [now - session.state.start_time for session in sessions]
        for session, event_log, seed_elapsed in zip(sessions, event_logs, elapsed, strict=True):
            if exit_code == 0 and last_log_step != args.total_timesteps - 1:
                event_log.elapsed(args.total_timesteps - 1, seed_elapsed)
            event_log.close()
            session.env.close()
    return exit_code, exit_status, global_step + 1, elapsed


def _batch_actions(batch: SeedBatch, global_step: int) -> list[np.ndarray]:
    """Each seed's action: random before learning_starts, as alone; then one batched forward
    with each seed's draw from its own generator."""
    sessions = batch.sessions
    if global_step < batch.args.learning_starts:
        return [session.env.action_space.sample() for session in sessions]
    observations = np.stack([session.state.observation for session in sessions])
    device = batch.learner.device
    actions = batch.learner.act(torch.as_tensor(observations, device=device)[:, None])
    return list(actions[:, 0].cpu().numpy())


def _batch_train_step(
    batch: SeedBatch, event_logs: list[EventLog], window: SteadyWindow, global_step: int
) -> bool:
    """The update the schedule asks for, for every seed at once (each from its own buffer);
    True when it was a log point."""
    args = batch.args
    schedule = scheduled_updates(args, global_step)
    if not schedule.train:
        return False
    samples = [session.buffer.sample(args.batch_size) for session in batch.sessions]
    metrics = batch.learner.update(stack_batches(samples), schedule)
    if not schedule.log:
        return False
    now = time.time()
    steady_sps = window.sps(global_step, now)
    for index, (session, event_log, label) in enumerate(
        zip(batch.sessions, event_logs, batch.labels(), strict=True)
    ):
        seed_metrics = {name: values[index] for name, values in metrics.items()}
        log_update(
            session, event_log, seed_metrics, global_step, now=now, steady_sps=steady_sps,
            label=label,
        )  # fmt: skip
    window.restart(global_step, now)
    return True


def _maybe_checkpoint_batch(
    batch: SeedBatch,
    event_logs: list[EventLog],
    window: SteadyWindow,
    stop: StopRequested,
    finished_steps: int,
) -> None:
    """Every seed's checkpoint at the interval, or when a stop was asked for, unless done."""
    if not checkpoint_due(batch.args, stop, finished_steps):
        return
    checkpoint_started = time.time()
    elapsed = [checkpoint_started - session.state.start_time for session in batch.sessions]
    batch.sync_seed_learners()
    for session, event_log, seed_draws, seed_elapsed in zip(
        batch.sessions, event_logs, batch.draws, elapsed, strict=True
    ):
        event_log.flush()  # the checkpoint records the event files' sizes
        capture_checkpoint(
            session,
            global_step=finished_steps,
            elapsed_seconds=seed_elapsed,
            rng=seed_draws.checkpoint_states(),
        )
    window.pause(time.time() - checkpoint_started)

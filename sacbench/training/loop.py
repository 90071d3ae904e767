"""The training loop: CleanRL's SAC loop, with checkpoints, resume, the event log and progress.

`train` prepares a session (arguments, the run dir, learner, buffer, fresh or resumed state) and
records how it ended; `_training_session` steps the environment until the end or a stop signal.
The order of the event log's scalars and of the clock readings is CleanRL's and must stay so.
"""

from __future__ import annotations

import signal
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sacbench.sac.algorithm import LOG_EVERY, UpdateSchedule, update_schedule
from sacbench.sac.args import Args, require_valid_args, run_defining_args, with_run_dir
from sacbench.sac.cpu_features import NATIVE_BF16_FLAGS
from sacbench.sac.fast_learner import Gradients
from sacbench.sac.fused import FusedUpdateUnavailable
from sacbench.sac.learners import Learner, fast_gradients, make_learner, update_record
from sacbench.sac.mixed_precision import native_bf16_products
from sacbench.training.cleanrl_exact import (
    episode_return_after,
    replay_buffer_class,
    use_numpy1_control_cost,
)
from sacbench.training.envs import (
    Transition,
    check_env_id,
    float32_observation,
    make_env,
    step_env,
)
from sacbench.training.evaluation import Evaluator, deterministic_policy, evaluation_due
from sacbench.training.event_log import EventLog, SteadyWindow
from sacbench.training.progress import PROGRESS_FILE_NAME, RunProgress
from sacbench.training.replay import ReplayBuffer
from sacbench.training.rng import seed_everything
from sacbench.training.run_dir import RunDir, hold_run_dir, kill_point
from sacbench.training.run_outputs import complete_finished_run, save_final_policy
from sacbench.training.session import (
    LoopState,
    Session,
    capture_checkpoint,
    fresh_state,
    resume_state,
)
from sacbench.training.signals import StopRequested
from sacbench.training.tracking import finish_tracking, start_tracking
from sacbench.training.video import (
    check_rendering,
    training_video_path,
    use_headless_rendering,
)


def resolve_device(args: Args) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    use_cuda = args.device == "cuda" or (
        args.device == "auto" and args.cuda and torch.cuda.is_available()
    )
    return torch.device("cuda" if use_cuda else "cpu")


def chosen_gradients(args: Args, device: torch.device) -> tuple[Gradients | None, str | None]:
    """The fast path's formulation (None on the reference path), and why the fused update is not
    it where it could not be built (else None). Chosen before the run dir is touched: the fused
    update's C++ is built now (20-40 seconds, once per build directory); where it cannot be, the
    eager hand-written update trains instead, after one warning that says why."""
    if args.update_path == "reference":
        return None, None
    try:
        return fast_gradients(args, device), None
    except FusedUpdateUnavailable as error:
        warnings.warn(
            f"{error}; training with the eager hand-written update instead (the same "
            "mathematics, slower; --no-fused-update chooses it without trying the build)",
            stacklevel=3,
        )
        return "handwritten", str(error)


def train(args: Args) -> int:
    """Train (or resume) the run in args.run_dir; return the process exit status."""
    args = announced_run_dir(args)
    check_arguments(args)
    # One process per run dir, from before anything in it changes until this one ends.
    with hold_run_dir(Path(args.run_dir), program="python -m sacbench.train") as run_dir:
        return _train_held_run_dir(args, run_dir)


def _train_held_run_dir(args: Args, run_dir: RunDir) -> int:
    if finished_run(run_dir, args):
        return 0
    if args.capture_video:
        use_headless_rendering()  # before MuJoCo is imported
    env = make_env(args.env_id, seed=args.seed)  # refuses a non-Box task before any file is made
    if args.cleanrl_exact:
        use_numpy1_control_cost(env, args.env_id)
    if args.capture_video:
        check_rendering(args.env_id)  # a machine that cannot film fails before training
    device = resolve_device(args)
    if args.precision == "bf16" and not native_bf16_products(device):
        warnings.warn(
            f"--precision bf16: this machine's {device.type} has no bfloat16 matrix units (a "
            f"CPU needs {' or '.join(sorted(NATIVE_BF16_FLAGS))} among its /proc/cpuinfo "
            "flags, a GPU compute capability 8.0), so torch emulates the products and they run "
            "slower than with --precision fp32",
            stacklevel=2,
        )
    gradients, fused_unavailable = chosen_gradients(args, device)
    checkpoint = run_dir.prepare(run_defining_args(args), overwrite=args.overwrite)
    # Before the event log's SummaryWriter exists, which W&B must see created (--track only).
    tracker = start_tracking(args=args, run_dir=run_dir.path, device=str(device))

    torch.set_num_threads(args.threads)
    seed_everything(args.seed, torch_deterministic=args.torch_deterministic)
    learner, buffer = build_learner_and_buffer(args, env, device, gradients=gradients)
    if checkpoint is None:
        state = fresh_state(env, seed=args.seed)
    else:
        state = resume_state(
            checkpoint, seed=args.seed, env=env, learner=learner, buffer=buffer, run_dir=run_dir
        )
    progress = run_progress(run_dir, args, state, checkpoint)
    update = update_record(learner)
    if fused_unavailable is not None:
        update["fused_update_unavailable"] = fused_unavailable
    run_dir.begin_session(args=args, device=str(device), start_step=state.step, update=update)
    session = Session(args, run_dir, env, learner, buffer, device, progress, state)
    try:
        exit_code, exit_status, end_step, elapsed_total = _training_session(session)
    except BaseException as error:
        progress.write_failed(elapsed_seconds=time.time() - state.start_time)
        run_dir.end_session_after_error(error)
        finish_tracking(tracker, exit_code=1, stopped=False)
        raise
    record_end(session, exit_code, exit_status, end_step, elapsed_total)
    finish_tracking(tracker, exit_code=exit_code, stopped=exit_code != 0)
    return exit_code


def announced_run_dir(args: Args) -> Args:
    """`args` with its run dir (runs/{env_id}__{exp_name}__{seed} when none was given), which
    the log's first line names."""
    resolved = with_run_dir(args)
    how = "" if args.run_dir is not None else " (no --run-dir: runs/{env_id}__{exp_name}__{seed})"
    print(f"run dir: {resolved.run_dir}{how}", flush=True)
    return resolved


def check_arguments(args: Args) -> None:
    require_valid_args(args)
    check_env_id(args.env_id)
    if args.learning_starts >= args.total_timesteps:
        warnings.warn(
            f"--learning-starts {args.learning_starts} >= --total-timesteps "
            f"{args.total_timesteps}: no training update will run",
            stacklevel=3,  # the caller of train(), as before this check moved here
        )


def finished_run(run_dir: RunDir, args: Args) -> bool:
    """True (having said so, and restored complete.json) when the run in run_dir is finished."""
    if run_dir.differing_args(run_defining_args(args)):
        return False
    finished = run_dir.finished_record(total_timesteps=args.total_timesteps)
    if finished is None:
        return False
    # Session settings (threads, device, checkpoint interval) do not change what a run
    # computes: a finished run is never trained again for them, nor because its
    # completion record was removed (Snakemake removes it before rerunning a job).
    restored = not run_dir.is_complete()
    run_dir.restore_completion(finished)
    for line in complete_finished_run(run_dir, args):
        print(line)
    print(
        f"{run_dir.path} holds a run that finished all {args.total_timesteps} steps "
        f"(at {finished['finished_at']}); nothing to do"
        + ("; its completion record was restored" if restored else "")
        + f". To train it again from scratch, move {run_dir.path} away first."
    )
    return True


def build_learner_and_buffer(
    args: Args, env: gym.Env, device: torch.device, *, gradients: Gradients | None = None
) -> tuple[Learner, ReplayBuffer]:
    """The learner (the fast path's formulation `gradients`, by default fast_gradients' choice)
    and an empty replay buffer for `env`."""
    obs_dim = int(np.prod(env.observation_space.shape))
    action_space = env.action_space
    assert isinstance(action_space, gym.spaces.Box)
    learner = make_learner(
        args=args,
        obs_dim=obs_dim,
        action_low=action_space.low,
        action_high=action_space.high,
        device=device,
        gradients=gradients,
    )
    buffer = replay_buffer_class(cleanrl_exact=args.cleanrl_exact)(
        capacity=args.buffer_size,
        obs_dim=obs_dim,
        action_dim=action_space.shape[0],
        seed=args.seed,
        device=str(device),
    )
    return learner, buffer


def run_progress(
    run_dir: RunDir, args: Args, state: LoopState, checkpoint: dict[str, Any] | None
) -> RunProgress:
    return RunProgress(
        path=run_dir.path / PROGRESS_FILE_NAME,
        total_timesteps=args.total_timesteps,
        learning_starts=args.learning_starts,
        start_step=state.step,
        saved=None if checkpoint is None else checkpoint.get("progress"),
    )


def record_end(
    session: Session, exit_code: int, exit_status: str, end_step: int, elapsed_total: float
) -> None:
    if exit_code == 0:
        if session.args.save_model:
            save_final_policy(session.run_dir.path, session.args, session.learner.actor)
        session.run_dir.finish(
            {"learner": session.learner.state_dict(), "buffer": {"added": session.buffer.added}},
            global_step=session.args.total_timesteps,
            elapsed_seconds=elapsed_total,
            eval_seconds=session.state.eval_seconds,
        )
    session.progress.write(
        state="completed" if exit_code == 0 else "stopped",
        global_step=end_step,
        elapsed_seconds=elapsed_total,
    )
    session.run_dir.end_session(exit_status=exit_status, end_step=end_step)


def _training_session(session: Session) -> tuple[int, str, int, float]:
    """Steps state.step.. until the end or a stop signal; (exit code, status, end step, elapsed)."""
    args, state = session.args, session.state
    event_log = EventLog(*session.run_dir.open_writer())
    state.event_files = [*state.event_files, {"name": event_log.file_name, "size": 0}]
    if state.step == 0:
        event_log.hyperparameters(args)
    state.observation = float32_observation(state.observation)
    # From the first training step on: see SteadyWindow.
    window = SteadyWindow(step=state.step - 1, time=time.time())
    last_log_step = -1
    exit_status, exit_code = "completed", 0
    global_step = state.step
    session.progress.write(global_step=state.step, elapsed_seconds=time.time() - state.start_time)
    evaluator = None
    if args.eval_episodes > 0:
        evaluator = Evaluator(env_id=args.env_id, seed=args.seed, episodes=args.eval_episodes)
    with StopRequested() as stop:
        for global_step in range(state.step, args.total_timesteps):
            if global_step == args.learning_starts + 1:
                window.restart(global_step - 1, time.time())
            action = select_action(
                global_step,
                learning_starts=args.learning_starts,
                observation=state.observation,
                learner=session.learner,
                action_space=session.env.action_space,
                device=session.device,
            )
            record_env_step(session, event_log, global_step, action)
            if _train_step(session, event_log, window, global_step):
                last_log_step = global_step
            finished_steps = global_step + 1
            _maybe_evaluate(session, evaluator, event_log, window, finished_steps)
            # One reading of the stop signal for this step's checkpoint and exit: a signal that
            # arrived between two readings would stop the run without its checkpoint.
            stop_signal = stop.signal_number
            _maybe_checkpoint(session, event_log, window, stop_signal, finished_steps)
            stopped = stop_status(stop_signal, finished_steps, args.total_timesteps)
            if stopped is not None:
                exit_status, exit_code = stopped
                break
            report_progress(session, finished_steps)
        elapsed_total = time.time() - state.start_time
        # The last step's elapsed time, unless the log cadence has just written it.
        if exit_code == 0 and last_log_step != args.total_timesteps - 1:
            event_log.elapsed(args.total_timesteps - 1, elapsed_total)
        event_log.close()
        session.env.close()
        if evaluator is not None:
            evaluator.close()
    return exit_code, exit_status, global_step + 1, elapsed_total


def select_action(
    global_step: int,
    *,
    learning_starts: int,
    observation: np.ndarray,
    learner: Learner,
    action_space: gym.Space,
    device: torch.device,
) -> np.ndarray:
    """Random actions before learning_starts (CleanRL's warm-up), the policy's from it on."""
    if global_step < learning_starts:
        return action_space.sample()
    action_tensor = learner.act(torch.as_tensor(observation, device=device)[None])
    return action_tensor[0].cpu().numpy()


def store_transition(
    buffer: ReplayBuffer, *, observation: np.ndarray, action: np.ndarray, transition: Transition
) -> None:
    """One env step's buffer row: its true next (or final) observation, and terminated only (a
    time-limit truncation still bootstraps)."""
    buffer.add(
        observation=observation,
        next_observation=transition.next_observation,
        action=action,
        reward=transition.reward,
        terminated=transition.terminated,
    )


def record_env_step(
    session: Session, event_log: EventLog, global_step: int, action: np.ndarray, *, label: str = ""
) -> None:
    """One env step of the session's run: its buffer row, the episode's sums, its end (`label`
    starts the episode's line of output)."""
    state = session.state
    transition = step_env(session.env, action=action)
    store_transition(
        session.buffer, observation=state.observation, action=action, transition=transition
    )
    state.episode_return = episode_return_after(
        state.episode_return, transition.reward, cleanrl_exact=session.args.cleanrl_exact
    )
    state.episode_length += 1
    state.observation = transition.continue_from
    if transition.episode_over:
        event_log.episode(
            global_step, episode_return=state.episode_return, episode_length=state.episode_length
        )
        print(
            f"{label}global_step={global_step}, episodic_return={state.episode_return}", flush=True
        )
        session.progress.record_episode(episodic_return=state.episode_return)
        state.episode_return, state.episode_length = 0.0, 0


def _train_step(
    session: Session, event_log: EventLog, window: SteadyWindow, global_step: int
) -> bool:
    """The update the schedule asks for at global_step, if any; True when it was a log point."""
    args = session.args
    schedule = scheduled_updates(args, global_step)
    if not schedule.train:
        return False
    metrics = session.learner.update(session.buffer.sample(args.batch_size), schedule)
    if not schedule.log:
        return False
    now = time.time()
    log_update(
        session, event_log, metrics, global_step, now=now, steady_sps=window.sps(global_step, now)
    )
    window.restart(global_step, now)
    return True


def scheduled_updates(args: Args, global_step: int) -> UpdateSchedule:
    """CleanRL's schedule at global_step, under the run's args."""
    return update_schedule(
        global_step,
        learning_starts=args.learning_starts,
        policy_frequency=args.policy_frequency,
        target_network_frequency=args.target_network_frequency,
    )


def log_update(
    session: Session,
    event_log: EventLog,
    metrics: dict[str, torch.Tensor],
    global_step: int,
    *,
    now: float,
    steady_sps: float,
) -> None:
    """A log point of the session's run: its losses, SPS and elapsed time. Nothing is printed:
    report_progress's progress line replaces CleanRL's SPS line every 100 steps."""
    elapsed = now - session.state.start_time
    event_log.update(metrics, global_step, elapsed=elapsed, steady_sps=steady_sps)


def _maybe_evaluate(
    session: Session,
    evaluator: Evaluator | None,
    event_log: EventLog,
    window: SteadyWindow,
    finished_steps: int,
) -> None:
    """The evaluation due once `finished_steps` steps are done, if any (before the checkpoint of
    that step, so a resume neither repeats nor skips one); its time is not training time."""
    args, state = session.args, session.state
    if evaluator is None or not evaluation_due(
        finished_steps, eval_frequency=args.eval_frequency, total_timesteps=args.total_timesteps
    ):
        return
    final = finished_steps == args.total_timesteps
    video = None
    if args.capture_video:
        video = training_video_path(session.run_dir.path, step=finished_steps, final=final)
    policy = deterministic_policy(session.learner.actor, session.device)
    # replace: a resumed run repeats an evaluation whose events the resume cut off.
    result = evaluator.run(policy, step=finished_steps, video=video, replace=True)
    # Left out of charts/SPS, steady_SPS, elapsed_seconds (and complete.json's elapsed_seconds).
    state.start_time += result.seconds
    window.pause(result.seconds)
    state.eval_seconds += result.seconds
    event_log.evaluation(
        finished_steps,
        returns=result.returns,
        lengths=result.lengths,
        eval_seconds=state.eval_seconds,
    )
    kill_point(f"after-evaluation-{finished_steps}")  # tests: a kill before its checkpoint
    mean_return = sum(result.returns) / len(result.returns)
    print(
        f"evaluation after {finished_steps} steps: mean return {mean_return:.2f} over "
        f"{len(result.returns)} episodes ({result.seconds:.1f} s)",
        flush=True,
    )


def _maybe_checkpoint(
    session: Session,
    event_log: EventLog,
    window: SteadyWindow,
    stop_signal: int | None,
    finished_steps: int,
) -> None:
    """Checkpoint at the interval, or when a signal asked to stop, unless the run is done."""
    if not checkpoint_due(session.args, stop_signal, finished_steps):
        return
    checkpoint_started = time.time()
    elapsed_seconds = time.time() - session.state.start_time  # read before the flush, as always
    event_log.flush()  # the checkpoint records the event files' sizes
    capture_checkpoint(session, global_step=finished_steps, elapsed_seconds=elapsed_seconds)
    # Keep steady_SPS about training: the pause for the checkpoint is not counted.
    window.pause(time.time() - checkpoint_started)


def checkpoint_due(args: Args, stop_signal: int | None, finished_steps: int) -> bool:
    """A checkpoint is due after `finished_steps` steps: at the interval, or when a signal
    (`stop_signal`) asked to stop, unless the run is done."""
    periodic = args.checkpoint_interval > 0 and finished_steps % args.checkpoint_interval == 0
    return (periodic or stop_signal is not None) and finished_steps < args.total_timesteps


def stop_status(
    stop_signal: int | None, finished_steps: int, total_timesteps: int
) -> tuple[str, int] | None:
    """(exit status, exit code) when `stop_signal` stops the run here: checkpoint_due, given the
    same signal, has just checkpointed it."""
    if stop_signal is None or finished_steps >= total_timesteps:
        return None
    name = signal.Signals(stop_signal).name
    print(f"{name} received: checkpointed at step {finished_steps}; rerun to resume")
    return f"signal {name}", 128 + stop_signal


def report_progress(session: Session, finished_steps: int, *, label: str = "") -> None:
    # In the random-action phase too: watchers see a run move from its first steps on.
    session.progress.print_line(global_step=finished_steps, label=label)
    if finished_steps % LOG_EVERY == 0 and finished_steps < session.args.total_timesteps:
        session.progress.update(
            global_step=finished_steps, elapsed_seconds=time.time() - session.state.start_time
        )

"""What a run leaves besides its event log: the saved actor (--save-model) and the final video
(--capture-video). Both are session settings, so a finished run asked for them later gets them
from its final state without training again."""

from __future__ import annotations

from pathlib import Path

import torch

from sacbench.sac.algorithm import Actor
from sacbench.sac.args import Args
from sacbench.training.evaluation import Evaluator, deterministic_policy
from sacbench.training.policy_file import actor_from_state_dict, policy_path, save_policy
from sacbench.training.run_dir import RunDir
from sacbench.training.video import training_video_path


def save_final_policy(run_dir: Path, args: Args, actor: Actor) -> Path:
    path = policy_path(run_dir, exp_name=args.exp_name)
    save_policy(
        path,
        actor=actor,
        env_id=args.env_id,
        seed=args.seed,
        global_step=args.total_timesteps,
        exp_name=args.exp_name,
        update_path=args.update_path,
    )
    return path


def complete_finished_run(run_dir: RunDir, args: Args) -> list[str]:
    """Write the saved actor and final video that `args` ask for and a finished run lacks, from
    its final state; what was written, or why it could not be, as lines to print."""
    model = policy_path(run_dir.path, exp_name=args.exp_name)
    video = training_video_path(run_dir.path, step=args.total_timesteps, final=True)
    wanted = (args.save_model and not model.exists()) or (
        args.capture_video and args.eval_episodes > 0 and not video.exists()
    )
    if not wanted:
        return []
    state = run_dir.final_state()
    if not state:  # finished by sacbench 0.1.0, or its final state was lost: no last actor
        return [f"{run_dir.path} keeps no final actor: no saved model or video can be made"]
    actor = actor_from_state_dict(state["learner"]["actor"])
    lines = []
    if args.save_model and not model.exists():
        lines.append(f"saved the final actor to {save_final_policy(run_dir.path, args, actor)}")
    if args.capture_video and args.eval_episodes > 0 and not video.exists():
        # The final evaluation's first episode, from the same seed, filmed.
        evaluator = Evaluator(env_id=args.env_id, seed=args.seed, episodes=1)
        try:
            evaluator.run(
                deterministic_policy(actor, torch.device("cpu")),
                step=args.total_timesteps,
                video=video,
                replace=False,
            )
        finally:
            evaluator.close()
        lines.append(f"recorded the final evaluation's first episode to {video}")
    return lines

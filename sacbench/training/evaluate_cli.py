"""`python -m sacbench.evaluate RUN_DIR [--episodes K] [--video] [--seed S]`: a saved policy's
deterministic returns, without the trainer.

RUN_DIR is a run dir holding one `*.cleanrl_model` (written by --save-model) or the file itself.
By default the episodes are those of the run's final evaluation (the run's seed, the policy's
step), so the returns equal the final `eval/episodic_return` points when evaluated on the device
the run was trained on (CPU here); --seed S draws other episodes. With --video the first episode
is filmed into RUN_DIR/videos/evaluate-seed{S}.mp4 (or -2, -3, ...: no video is overwritten).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from sacbench.training.envs import EnvError
from sacbench.training.evaluation import Evaluation, Evaluator, deterministic_policy
from sacbench.training.policy_file import POLICY_SUFFIX, PolicyFileError, load_policy
from sacbench.training.video import (
    VIDEO_DIR_NAME,
    VideoError,
    free_video_path,
    use_headless_rendering,
)


def find_policy_file(target: Path) -> Path:
    """`target` itself when it is a policy file, else the one policy file in the run dir."""
    if target.is_file() or target.suffix == POLICY_SUFFIX:
        return target
    if not target.is_dir():
        raise PolicyFileError(f"{target}: no such run dir or policy file")
    found = sorted(target.glob(f"*{POLICY_SUFFIX}"))
    if not found:
        raise PolicyFileError(
            f"{target} holds no *{POLICY_SUFFIX} file: train with --save-model (asked again with "
            "it, a finished run writes it from its final state without training)"
        )
    if len(found) > 1:
        names = ", ".join(path.name for path in found)
        raise PolicyFileError(f"{target} holds several policy files ({names}): name one")
    return found[0]


def evaluate_saved_policy(
    target: Path, *, episodes: int, video: bool, seed: int | None = None
) -> Evaluation:
    """Load the policy at `target` and run `episodes` deterministic episodes on the CPU."""
    saved = load_policy(find_policy_file(target))
    if video:
        use_headless_rendering()  # before the env imports MuJoCo
    seed = saved.seed if seed is None else seed
    evaluator = Evaluator(env_id=saved.env_id, seed=seed, episodes=episodes)
    try:
        observation_size = evaluator.env.observation_space.shape
        if observation_size != (saved.payload["obs_dim"],):
            raise PolicyFileError(
                f"{saved.path}: made for observations of size {saved.payload['obs_dim']}, but "
                f"{saved.env_id} has {observation_size}"
            )
        video_path = None
        if video:
            video_path = free_video_path(
                saved.path.parent / VIDEO_DIR_NAME, stem=f"evaluate-seed{seed}"
            )
        policy = deterministic_policy(saved.actor, torch.device("cpu"))
        return evaluator.run(policy, step=saved.global_step, video=video_path, replace=False)
    finally:
        evaluator.close()


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got 0")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sacbench.evaluate",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="run dir or policy file")
    parser.add_argument("--episodes", type=_positive, default=10, help="episodes (default 10)")
    parser.add_argument(
        "--video", action="store_true", help="film the first episode into RUN_DIR/videos/"
    )
    parser.add_argument(
        "--seed", type=_non_negative, default=None, help="episode seeds' base (default: the run's)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        result = evaluate_saved_policy(
            options.run_dir, episodes=options.episodes, video=options.video, seed=options.seed
        )
    except (PolicyFileError, EnvError, VideoError) as error:
        print(f"sacbench.evaluate: error: {error}", file=sys.stderr)
        return 2
    for index, episode in enumerate(result.episodes):
        print(
            f"episode {index}: seed {episode.seed}, "
            f"return {episode.episodic_return:.3f}, length {episode.length}"
        )
    spread = statistics.pstdev(result.returns)
    print(
        f"mean return {statistics.fmean(result.returns):.3f} ± {spread:.3f} over "
        f"{len(result.returns)} episodes ({result.seconds:.1f} s)"
    )
    if result.video is not None:
        print(f"video: {result.video}")
    return 0

"""The trainer's arguments: CleanRL's sac_continuous_action flags and defaults, plus sacbench's own.

Each field's docstring is its --help text (tyro reads them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal


@dataclass
class Args:
    exp_name: str = "sac_continuous_action"
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda is used when available and --device is auto"""
    track: bool = False
    """sync this run to Weights & Biases: its TensorBoard scalars, args and provenance
    (docs/wandb.md); WANDB_MODE=offline keeps it in the run dir's wandb/"""
    wandb_project_name: str = "sacbench"
    """the W&B project of a tracked run (CleanRL's default is "cleanRL"; sacbench's runs get
    their own project unless asked otherwise)"""
    wandb_entity: str | None = None
    """the W&B entity (user or team) that owns the project; None: the logged-in user's default"""
    env_id: str = "Hopper-v4"
    """the id of the environment"""
    total_timesteps: int = 1_000_000
    """total timesteps of the experiments"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    learning_starts: int = 5_000
    """timestep to start learning"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed)"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks"""
    alpha: float = 0.2
    """entropy regularization coefficient"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""

    # sacbench's additions
    run_dir: str | None = None
    """where events, metadata.json, checkpoints and complete.json go; re-running resumes here.
    None: runs/{env_id}__{exp_name}__{seed}, CleanRL's run name without its time, so that the
    same command run again resumes the run"""
    threads: int = 1
    """torch intra-op threads"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: cuda when --cuda and a GPU is present, else cpu"""
    checkpoint_interval: int = 10_000
    """steps between periodic checkpoints (0: only on SIGTERM/SIGUSR1/SIGINT)"""
    update_path: Literal["fast", "reference"] = "fast"
    """fast: ensemble critics, hand-written gradients; reference: CleanRL's computation literally"""
    cleanrl_exact: bool = False
    """(--update-path reference only) draw every random number as CleanRL's script (fe8d8a03)
    draws it: replay batches from numpy's global generator as its replay buffer samples them, and
    episodic returns summed in float32 as Gymnasium 0.29's RecordEpisodeStatistics sums them, so
    that its losses and returns equal the script's step for step (docs/cleanrl-exact.md)"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32: CleanRL's arithmetic. bf16 (opt-in, fast path only): the update's matrix products in
    bfloat16, with float32 weights, gradients, Adam state and losses; about twice as fast per
    product on CPUs with AVX512-BF16 or AMX and on GPUs, slower elsewhere"""
    compile: bool = False
    """compile the fast path's autograd formulation with torch.compile (for GPUs)"""
    cudagraphs: bool = False
    """capture the fast update in CUDA graphs (cuda only; needs --compile)"""
    fused_update: bool = True
    """on a CPU, the fast path (without --compile) computes its hand-written update in C++ with
    its elementwise work fused: compiled for this CPU on first use, which needs a C++ compiler;
    where it cannot be built, the eager hand-written update runs, with a warning that says why.
    The same mathematics up to summation order, its products in bfloat16 with --precision bf16.
    --no-fused-update: the eager hand-written update"""
    overwrite: bool = False
    """move a run dir holding different run-defining args aside (never deleted) and train afresh;
    a finished run with the same args is never trained again"""
    eval_frequency: int = 0
    """evaluate the deterministic policy every N training steps (0: only the final evaluation)"""
    eval_episodes: int = 10
    """episodes per evaluation, on an env of its own seeded apart from training; the final
    evaluation runs after the last step (0: no evaluation at all)"""
    capture_video: bool = False
    """record the first episode of each evaluation into RUN_DIR/videos/ (final.mp4, step-N.mp4)"""
    save_model: bool = False
    """save the final actor to RUN_DIR/{exp_name}.cleanrl_model (python -m sacbench.evaluate)"""


# Fields that may change between sessions of the same run without changing what it computes
# (or, for threads and device, that a resumed job may legitimately run with other resources).
SESSION_FIELDS: frozenset[str] = frozenset(
    {
        "run_dir",
        "threads",
        "device",
        "checkpoint_interval",
        "overwrite",
        "cuda",
        "compile",
        "cudagraphs",
        "fused_update",
        # What a run leaves besides its training: videos of its evaluations, its final actor.
        "capture_video",
        "save_model",
        # Where a run is reported, never what it computes.
        "track",
        "wandb_project_name",
        "wandb_entity",
    }
)

# Run-defining fields added after run dirs were first recorded, with the value that a run dir
# recorded before each existed stands for: such a run is the same run when asked with that value
# (its finished runs are not trained again). A finished run of that age has no final evaluation.
DEFAULTS_OF_UNRECORDED_FIELDS: dict[str, object] = {
    "eval_frequency": 0,
    "eval_episodes": 10,
    "precision": "fp32",
    "cleanrl_exact": False,
}

ARG_NAMES: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(Args))

# The fields of the Args of CleanRL's own cleanrl/sac_continuous_action.py (read at commit
# fe8d8a03 of vwxyzjn/cleanrl). A pipeline variant that runs CleanRL's script (or a script with
# its flags) gets the shared ones of config.yaml's `train:` section; the trainer's arguments that
# are not among them (run_dir, threads, device, update_path, ...) exist only in sacbench.
CLEANRL_SAC_ARG_NAMES: frozenset[str] = frozenset(
    {
        "exp_name",
        "seed",
        "torch_deterministic",
        "cuda",
        "track",
        "wandb_project_name",
        "wandb_entity",
        "capture_video",
        "env_id",
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "gamma",
        "tau",
        "batch_size",
        "learning_starts",
        "policy_lr",
        "q_lr",
        "policy_frequency",
        "target_network_frequency",
        "alpha",
        "autotune",
    }
)


def validate_args(args: Args) -> list[str]:
    """Problems with the arguments, each naming the flag and value; empty when all is well."""
    problems: list[str] = []
    for name in (
        "total_timesteps",
        "buffer_size",
        "batch_size",
        "policy_frequency",
        "target_network_frequency",
        "threads",
    ):
        value = getattr(args, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            problems.append(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
    for name in ("learning_starts", "checkpoint_interval", "eval_frequency", "eval_episodes"):
        value = getattr(args, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(
                f"--{name.replace('_', '-')} must be a non-negative integer, got {value!r}"
            )
    for name in ("gamma", "tau"):
        value = getattr(args, name)
        if not 0.0 <= value <= 1.0:
            problems.append(f"--{name} must lie in [0, 1], got {value!r}")
    for name in ("policy_lr", "q_lr"):
        value = getattr(args, name)
        if not value > 0:
            problems.append(f"--{name.replace('_', '-')} must be positive, got {value!r}")
    if args.alpha < 0:
        problems.append(f"--alpha must be non-negative, got {args.alpha!r}")
    problems.extend(_wandb_problems(args))
    named = {problem.split(" ", 1)[0] for problem in problems}
    problems.extend(p for p in _float_and_path_problems(args) if p.split(" ", 1)[0] not in named)
    if args.cudagraphs and not args.compile:
        problems.append("--cudagraphs needs --compile")
    if args.update_path == "reference" and (args.compile or args.cudagraphs):
        problems.append("--compile/--cudagraphs apply to --update-path fast only")
    if args.precision not in ("fp32", "bf16"):
        problems.append(f"--precision must be fp32 or bf16, got {args.precision!r}")
    elif args.precision != "fp32" and args.update_path == "reference":
        problems.append(
            f"--precision {args.precision} applies to --update-path fast only "
            "(the reference path is CleanRL's float32 computation)"
        )
    problems.extend(_cleanrl_exact_problems(args))
    if args.capture_video and args.eval_episodes == 0:
        problems.append("--capture-video records evaluation episodes: it needs --eval-episodes > 0")
    return problems


def require_valid_args(args: Args) -> None:
    """Raise ValueError listing every problem validate_args finds."""
    problems = validate_args(args)
    if problems:
        raise ValueError("invalid arguments:\n  " + "\n  ".join(problems))


def _cleanrl_exact_problems(args: Args) -> list[str]:
    if args.cleanrl_exact and args.update_path != "reference":
        return [
            f"--cleanrl-exact draws as CleanRL's script on the reference path only: it needs "
            f"--update-path reference, got --update-path {args.update_path}"
        ]
    return []


def _float_and_path_problems(args: Args) -> list[str]:
    """Every float argument must be a finite number (an infinite or NaN learning rate trains a
    run of NaNs to the end), and --run-dir must name a folder (an empty one would train into
    the current directory)."""
    problems = [
        f"--{field.name.replace('_', '-')} must be a finite number, got {value!r}"
        for field in dataclasses.fields(args)
        if isinstance(value := getattr(args, field.name), float) and not math.isfinite(value)
    ]
    run_dir = args.run_dir
    if isinstance(run_dir, str) and not run_dir.strip():
        problems.append(f"--run-dir must name a folder, got {run_dir!r}")
    return problems


# Characters W&B refuses in a project name.
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def _wandb_problems(args: Args) -> list[str]:
    problems = []
    name = args.wandb_project_name
    if not name or any(character in name for character in WANDB_PROJECT_FORBIDDEN):
        problems.append(
            f"--wandb-project-name must be a non-empty W&B project name without any of "
            f"{' '.join(WANDB_PROJECT_FORBIDDEN)}, got {name!r}"
        )
    if args.wandb_entity is not None and not args.wandb_entity.strip():
        problems.append(
            f"--wandb-entity must name a W&B user or team (or be None), got {args.wandb_entity!r}"
        )
    return problems


def default_run_dir(args: Args) -> str:
    """CleanRL's runs/{run_name} without the time that ends its run name: one run dir per task,
    experiment and seed, which a second start of the same run finds and resumes."""
    return f"runs/{args.env_id}__{args.exp_name}__{args.seed}"


def with_run_dir(args: Args) -> Args:
    """`args` with run_dir filled in (default_run_dir) when it was not given."""
    if args.run_dir is not None:
        return args
    return dataclasses.replace(args, run_dir=default_run_dir(args))


def run_defining_args(args: Args) -> dict[str, object]:
    """The arguments that decide what a run computes; a run dir's metadata must match these."""
    return {
        key: value for key, value in dataclasses.asdict(args).items() if key not in SESSION_FIELDS
    }


def recorded_run_args(recorded: dict[str, object]) -> dict[str, object]:
    """A run dir's recorded args, with the fields it predates at the values it stands for."""
    return {**DEFAULTS_OF_UNRECORDED_FIELDS, **recorded}

"""The pipeline's config.yaml: validation, defaults, and what each train job gets from it.

Snakemake's workflow/rules/common.smk calls these pure functions; keeping the logic here lets the
tests exercise it without Snakemake. The JSON schema (workflow/schemas/config.schema.yaml) holds
types, ranges and defaults with descriptions; the checks that need Python (the trainer's own
argument validation, readable messages) live here.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sacbench.sac.args import ARG_NAMES, CLEANRL_SAC_ARG_NAMES, Args, validate_args
from sacbench.tags import LOG_EVERY, MIN_STEADY_SPS_POINTS, STEADY_SPS_TAG, log_steps
from sacbench.training.envs import EnvError, EnvSpaces, check_env_id, env_spaces

# Trainer arguments the pipeline sets per job (from the run matrix and the profile), so a config
# may not set them.
PIPELINE_ARGS: frozenset[str] = frozenset(
    {"env_id", "seed", "exp_name", "run_dir", "threads", "overwrite"}
)
CONFIGURABLE_ARGS: tuple[str, ...] = tuple(name for name in ARG_NAMES if name not in PIPELINE_ARGS)
# The pipeline passes these to a command variant's script itself (--env-id, --seed; the same as
# sacbench.pipeline.external.PIPELINE_FLAGS, which this light module does not import).
COMMAND_PIPELINE_ARGS: frozenset[str] = frozenset({"env_id", "seed"})
# The trainer's options that CleanRL's script does not have: a command variant may not set them,
# and it does not get them from `train:` (they configure sacbench's trainer, which it does not run).
SACBENCH_ONLY_ARGS: frozenset[str] = frozenset(ARG_NAMES) - CLEANRL_SAC_ARG_NAMES
# The keys of a command variant (workflow/schemas/config.schema.yaml, $defs/command_variant).
COMMAND_VARIANT_KEYS: tuple[str, ...] = ("command", "args", "inherit_train")

# A variant name becomes a directory name and a table column: no separators, no leading dot.
VARIANT_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# An env id is a directory name too (the schema's env_ids pattern).
ENV_ID_PATTERN = VARIANT_NAME_PATTERN

# Memory beyond the replay buffer: Python, torch, MuJoCo, the networks and their optimizers.
BASE_MEMORY_MB = 1536
# Time limits of train jobs (train_runtime_minutes). Steps per second of one training run on ONE
# core of a slow machine, with CleanRL's own update (sacbench's `reference` path, the slowest; the
# default `fast` path is about 1.6x faster) and one thread: measured on shared 2-vCPU AMD EPYC
# (Zen 3) virtual machines (docs/performance.md; docs/slurm.md has the table). The update (two
# layers of 256 units, batch 256) dominates each step, so the five smaller tasks train at about
# HalfCheetah's rate; Humanoid is slower (376 observation floats, a heavier simulation). Keyed by
# task name without its version, so that e.g. Humanoid-v5 is timed as Humanoid-v4.
SLOW_STEPS_PER_SECOND: dict[str, float] = {
    "HalfCheetah": 36.0,
    "Walker2d": 36.0,
    "Hopper": 36.0,
    "InvertedPendulum": 36.0,
    "Humanoid": 22.0,
    "Pusher": 36.0,
}
# Any other task (Ant, Swimmer, Reacher, HumanoidStandup, ...) is timed from its size: a step's
# time grows with the networks' input (observation + action floats) along the line through the
# two measured ends, HalfCheetah-v4 (23 floats, 36 steps/s) and Humanoid-v4 (393 floats, 22
# steps/s), and is never shorter than the small tasks' step. The simulation is a small part of a
# step (about 0.8 ms of Humanoid-v4's 40 ms on the reference path, docs/performance.md), and
# Humanoid's heavier simulation is folded into the slope, which makes the line conservative for
# tasks of its size; docs/slurm.md gives the figures for the tasks Gymnasium ships.
SIZE_ANCHORS: tuple[str, str] = ("HalfCheetah-v4", "Humanoid-v4")
# The limit asks for this many times the slow machine's training time: a busier or slower core,
# a slow file system, periodic checkpoints. A run that still hits the limit checkpoints and
# resumes in the next allocation (docs/slurm.md).
TIME_SAFETY_FACTOR = 1.5
# Interpreter, torch and MuJoCo start-up, and restoring a checkpoint (a replay buffer of
# several GB) when a run resumes.
STARTUP_MINUTES = 10
# Evaluations add to a train job's time: an evaluation step (the actor's forward pass and an env
# step, no update) runs at 2,400 steps/s or more on one core of the slow machines above
# (Humanoid-v4, the slowest; HalfCheetah-v4 6,200), and a filmed frame (MuJoCo's offscreen render
# with Mesa's software EGL, then the encoder) takes 31-66 ms there; the trainer's documentation
# quotes about 70 ms. Each evaluation episode is assumed to run to its time limit.
EVAL_STEPS_PER_SECOND = 2000.0
SECONDS_PER_FILMED_FRAME = 0.07
# No train job asks for more than a day, the most common time limit of general-purpose
# partitions; a run that needs longer continues in the next allocation, as at any time limit.
MAX_TRAIN_RUNTIME_MINUTES = 24 * 60


class ConfigError(ValueError):
    """config.yaml is unusable; `problems` lists each one, naming the key and the bad value."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            "invalid sacbench config:\n" + "\n".join(f"  - {p}" for p in self.problems)
        )


def load_schema(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def validated_config(config: Mapping[str, Any], *, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `config` with defaults filled in; raises ConfigError listing every problem."""
    if not isinstance(config, Mapping):
        raise ConfigError([f"config: expected a mapping of keys to values, got {config!r}"])
    filled = copy.deepcopy(dict(config))
    # `name:` with nothing after it in YAML means "no overrides".
    if isinstance(filled.get("variants"), dict):
        filled["variants"] = {
            name: ({} if overrides is None else overrides)
            for name, overrides in filled["variants"].items()
        }
    _fill_defaults(filled, schema, root=schema)
    problems = _schema_problems(filled, schema) + _env_problems(filled) + _command_problems(filled)
    problems += _results_dir_problems(filled)
    if not problems:
        problems = _trainer_problems(filled) + _video_problems(filled)
    if not problems:
        problems = _budget_problems(filled)
    if problems:
        raise ConfigError(problems)
    return filled


def is_command_variant(config: Mapping[str, Any], *, variant: str) -> bool:
    """Whether the variant runs an external command instead of sacbench's trainer."""
    return "command" in config["variants"][variant]


def trainer_args(config: Mapping[str, Any], *, variant: str) -> dict[str, Any]:
    """The configurable trainer arguments of one variant, in the trainer's field order."""
    if is_command_variant(config, variant=variant):
        raise ValueError(f"variant {variant!r} runs a command, not sacbench's trainer")
    merged = {**config["train"], **config["variants"][variant]}
    return {name: merged[name] for name in CONFIGURABLE_ARGS if name in merged}


def films_final_evaluation(config: Mapping[str, Any], *, env_id: str, seed: int | str) -> bool:
    """Whether this run's final evaluation is filmed for the report: the first seed of each task
    in video_env_ids (one video per task and variant is what the report shows)."""
    return env_id in config["video_env_ids"] and int(seed) == config["seeds"][0]


def run_trainer_args(
    config: Mapping[str, Any], *, variant: str, env_id: str, seed: int | str
) -> dict[str, Any]:
    """One run's configurable trainer arguments: its variant's, with capture_video on for the
    run whose final evaluation the report shows."""
    args = trainer_args(config, variant=variant)
    if films_final_evaluation(config, env_id=env_id, seed=seed):
        args["capture_video"] = True
    return args


def evaluates(config: Mapping[str, Any]) -> bool:
    """Whether some variant's runs log evaluations (eval_episodes above 0)."""
    return any(
        trainer_args(config, variant=variant).get("eval_episodes", 0) > 0
        for variant in config["variants"]
        if not is_command_variant(config, variant=variant)
    )


def command_words(command: Any) -> list[str]:
    """A command variant's program and first arguments: a string split as a POSIX shell splits
    words (no shell runs it), or a list of strings kept as it is."""
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError as error:  # an unclosed quote
            raise ValueError(f"cannot be split into words ({error}): {command!r}") from None
    elif isinstance(command, list) and all(isinstance(word, str) for word in command):
        words = list(command)
    else:
        raise ValueError(f"must be a string or a list of strings, got {command!r}")
    if not words or not all(words):
        raise ValueError(f"must name a program to run, got {command!r}")
    return words


def command_args(config: Mapping[str, Any], *, variant: str) -> dict[str, Any]:
    """A command variant's script flags by name: the `train` keys that CleanRL's script also has
    (unless inherit_train is false), overridden by the variant's `args`."""
    spec = config["variants"][variant]
    if "command" not in spec:
        raise ValueError(f"variant {variant!r} runs sacbench's trainer, not a command")
    shared: dict[str, Any] = {}
    if spec.get("inherit_train", True):
        shared = {  # a null (e.g. wandb_entity) leaves the script's own default, as for the trainer
            name: value
            for name, value in config["train"].items()
            if name in CLEANRL_SAC_ARG_NAMES and value is not None
        }
    return {**shared, **spec.get("args", {})}


def run_budget(config: Mapping[str, Any], *, variant: str) -> tuple[int, int]:
    """(total_timesteps, buffer_size) of a variant's runs, for its jobs' time and memory. A
    command variant that does not pass one of them is sized with `train`'s value."""
    if is_command_variant(config, variant=variant):
        args = {**config["train"], **command_args(config, variant=variant)}
    else:
        args = trainer_args(config, variant=variant)
    return args["total_timesteps"], args["buffer_size"]


def trainer_cli(args: Mapping[str, Any]) -> str:
    """Trainer arguments as shell-quoted command-line flags (booleans as --flag / --no-flag).

    None (YAML null) gives no flag: the trainer's optional arguments default to None.
    """
    unknown = sorted(set(args) - set(ARG_NAMES))
    if unknown:
        raise ValueError(f"not trainer arguments: {', '.join(unknown)}")
    flags: list[str] = []
    for name, value in args.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags.extend([flag, shlex.quote(str(value))])
    return " ".join(flags)


def replay_buffer_bytes(*, env_id: str, buffer_size: int) -> int:
    """obs, next_obs, action, reward and termination per transition, all float32; the sizes
    come from the env (an unknown or unusable id raises EnvError, a ValueError)."""
    if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size <= 0:
        raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
    spaces = env_spaces(env_id)
    floats_per_transition = 2 * spaces.observation_size + spaces.action_size + 2
    return 4 * floats_per_transition * buffer_size


def train_memory_mb(*, env_id: str, buffer_size: int, attempt: int = 1) -> int:
    """Memory to request for one train job; each retry asks for one more share (an OOM retry)."""
    if not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
    buffer_mb = replay_buffer_bytes(env_id=env_id, buffer_size=buffer_size) / 2**20
    return attempt * math.ceil(buffer_mb + BASE_MEMORY_MB)


def slow_steps_per_second(env_id: str) -> float:
    """Training throughput assumed for `env_id` on one slow core: measured for the benchmark's
    tasks (SLOW_STEPS_PER_SECOND, any version), derived from the env's sizes for the others."""
    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(f"env_id must be a Gymnasium env id such as 'Hopper-v4', got {env_id!r}")
    task = re.sub(r"-v\d+$", "", env_id)
    if task in SLOW_STEPS_PER_SECOND:
        return SLOW_STEPS_PER_SECOND[task]
    return size_derived_steps_per_second(env_spaces(env_id))


def size_derived_steps_per_second(spaces: EnvSpaces) -> float:
    """Steps per second on one slow core for a task of these sizes (SIZE_ANCHORS): seconds per
    step linear in observation + action floats, never below the smaller anchor's."""
    small, large = (
        (_input_size(env_spaces(env_id)), 1.0 / slow_steps_per_second(env_id))
        for env_id in SIZE_ANCHORS
    )
    seconds_per_float = (large[1] - small[1]) / (large[0] - small[0])
    extra_floats = max(_input_size(spaces) - small[0], 0)
    return 1.0 / (small[1] + seconds_per_float * extra_floats)


def _input_size(spaces: EnvSpaces) -> int:
    """The critics' input: observation and action floats."""
    return spaces.observation_size + spaces.action_size


def evaluation_seconds(run_args: Mapping[str, Any], *, env_id: str) -> float:
    """An upper bound on one run's evaluation time (every evaluation's episodes at their time
    limit, and the first episode of each filmed when capture_video is on), on a slow core."""
    import gymnasium

    episodes = run_args.get("eval_episodes", 0)
    if not episodes:
        return 0.0
    total, frequency = run_args["total_timesteps"], run_args.get("eval_frequency", 0)
    # Every eval_frequency steps before the last, plus the final evaluation.
    evaluations = (total - 1) // frequency + 1 if frequency else 1
    episode_steps = gymnasium.spec(env_id).max_episode_steps or 1000
    seconds = evaluations * episodes * episode_steps / EVAL_STEPS_PER_SECOND
    if run_args.get("capture_video"):
        seconds += evaluations * episode_steps * SECONDS_PER_FILMED_FRAME
    return seconds


def train_runtime_minutes(
    *, env_id: str, total_timesteps: int, evaluation_seconds: float = 0.0
) -> int:
    """Wall-clock limit for one train job: start-up plus TIME_SAFETY_FACTOR times the training
    time at the task's slow throughput and the evaluation time, at most
    MAX_TRAIN_RUNTIME_MINUTES."""
    if (
        not isinstance(total_timesteps, int)
        or isinstance(total_timesteps, bool)
        or total_timesteps <= 0
    ):
        raise ValueError(f"total_timesteps must be a positive integer, got {total_timesteps!r}")
    seconds = TIME_SAFETY_FACTOR * (
        total_timesteps / slow_steps_per_second(env_id) + evaluation_seconds
    )
    return min(STARTUP_MINUTES + math.ceil(seconds / 60), MAX_TRAIN_RUNTIME_MINUTES)


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    reference = schema.get("$ref")
    if not reference:
        return schema
    node: Any = root
    for part in reference.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _fill_defaults(instance: Any, schema: Mapping[str, Any], *, root: Mapping[str, Any]) -> None:
    """Fill defaults of declared properties only; additionalProperties (variant overrides) stay
    sparse so that a variant overrides only what it names."""
    if not isinstance(instance, dict):
        return
    for name, property_schema in schema.get("properties", {}).items():
        if name not in instance and "default" in property_schema:
            instance[name] = copy.deepcopy(property_schema["default"])
        if name in instance:
            _fill_defaults(instance[name], _resolve(property_schema, root), root=root)


def _key(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "config"


def _strict_validator_class(schema: Mapping[str, Any]) -> Any:
    """The schema's validator, except that an integer must be a Python int: JSON Schema counts
    1.0 as an integer, but `seeds: [1.0]` names no run dir (results/runs/.../1.0) that the
    trainer ever writes, and such a value failed only later, as a MissingInputException."""
    base = jsonschema.validators.validator_for(schema)
    strict_types = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=strict_types)


def _results_dir_problems(config: Mapping[str, Any]) -> list[str]:
    """results_dir, or a folder on its way, must not be a file (every job would fail writing
    into it, with a traceback)."""
    results_dir = config.get("results_dir")
    if not isinstance(results_dir, str):
        return []
    path = Path(results_dir)
    for part in [path, *path.parents]:
        if part.exists() and not part.is_dir():
            return [f"results_dir: {results_dir!r} cannot be a folder: {str(part)!r} is a file"]
    return []


def _schema_problems(config: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    validator = _strict_validator_class(schema)(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path))):
        problems.extend(_describe(error))
    return problems


def _extra_key_message(path: list[str | int], extra: str, allowed: list[str]) -> str:
    """The message for a key that the schema does not allow at `path`."""
    key = _key([*path, extra])
    if path[:1] == ["variants"] and "command" in allowed:
        return (
            f"{key}: a command variant takes only {', '.join(COMMAND_VARIANT_KEYS)}; the "
            f"script's flags, such as {extra!r}, go under {_key([*path, 'args'])}"
        )
    if path and path[0] in ("train", "variants") and extra in PIPELINE_ARGS:
        return (
            f"{key}: {extra!r} is set by the pipeline for each run "
            "(env_ids and seeds choose env_id and seed; threads come from the profile)"
        )
    if path and path[0] in ("train", "variants"):
        return (
            f"{key}: {extra!r} is not a trainer argument; "
            f"trainer arguments are: {', '.join(allowed)}"
        )
    return f"{key}: unknown key {extra!r}; allowed keys here: {', '.join(allowed)}"


def _describe(error: jsonschema.ValidationError) -> list[str]:
    path = list(error.absolute_path)
    key = _key(path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return [
            _extra_key_message(path, extra, allowed)
            for extra in sorted(set(error.instance) - set(allowed))
        ]
    # A property name's error (propertyNames) comes as its pattern's, at the mapping's path.
    if (
        error.validator in ("propertyNames", "pattern")
        and path[:1] == ["variants"]
        and path[2:] == ["args"]
    ):
        return [
            f"{key}: flag name {error.instance!r} is not a Python identifier in lower case "
            "(letters, digits and '_'; it becomes --name-with-dashes)"
        ]
    if error.validator == "propertyNames" or (
        path[:1] == ["variants"] and error.validator == "pattern"
    ):
        return [
            f"variants: variant name {error.instance!r} cannot be a directory name "
            "(use letters, digits, '_', '-' and '.', starting with a letter or digit)"
        ]
    if error.validator == "pattern" and path[:1] == ["env_ids"]:
        return [
            f"{key}: env id {error.instance!r} cannot be a directory name (run dirs are "
            "results/runs/{variant}/{env_id}/{seed}); namespaced ids such as 'ns/Task-v0' are not "
            "supported"
        ]
    if error.validator == "uniqueItems":
        duplicates = sorted(
            {repr(item) for item in error.instance if error.instance.count(item) > 1}
        )
        return [f"{key}: duplicate entries {', '.join(duplicates)} in {error.instance!r}"]
    if error.validator == "minItems" or error.validator == "minProperties":
        return [f"{key}: must not be empty, got {error.instance!r}"]
    if repr(error.instance) in error.message:
        return [f"{key}: {error.message}"]
    return [f"{key}: {error.message} (got {error.instance!r})"]


def _env_problems(config: Mapping[str, Any]) -> list[str]:
    """Each env id must make a MuJoCo env with a continuous action space (training.envs); ids
    that are not even a directory name are the schema's to report."""
    env_ids = config.get("env_ids")
    problems: list[str] = []
    for index, env_id in enumerate(env_ids if isinstance(env_ids, list) else []):
        if not isinstance(env_id, str) or not ENV_ID_PATTERN.fullmatch(env_id):
            continue
        try:
            check_env_id(env_id)
        except EnvError as error:
            problems.append(f"env_ids[{index}]: {error}")
    return problems


def _command_problems(config: Mapping[str, Any]) -> list[str]:
    """A command variant's command must name a program, and its args may not be flags that the
    pipeline sets or that only sacbench's trainer has. Runs beside the schema's checks, so it
    looks only at what has the right shape."""
    variants = config.get("variants")
    problems: list[str] = []
    for variant, spec in variants.items() if isinstance(variants, dict) else ():
        if not isinstance(spec, dict) or "command" not in spec:
            continue
        key = f"variants.{variant}"
        if isinstance(spec["command"], str | list):
            try:
                command_words(spec["command"])
            except ValueError as error:
                problems.append(f"{key}.command: {error}")
        args = spec.get("args")
        for name in args if isinstance(args, dict) else ():
            if name in COMMAND_PIPELINE_ARGS:
                problems.append(
                    f"{key}.args.{name}: {name!r} is set by the pipeline for each run "
                    "(env_ids and seeds choose it; the script gets --env-id and --seed)"
                )
            elif name in SACBENCH_ONLY_ARGS:
                problems.append(
                    f"{key}.args.{name}: {name!r} is an option of sacbench's trainer, which a "
                    "command variant does not run (CleanRL's script has no such flag)"
                )
    return problems


def _trainer_problems(config: Mapping[str, Any]) -> list[str]:
    """The trainer's own argument checks (e.g. cudagraphs needs compile) for every variant that
    runs the trainer."""
    problems: list[str] = []
    for variant in config["variants"]:
        if is_command_variant(config, variant=variant):
            continue
        merged = trainer_args(config, variant=variant)
        args = Args(**merged, env_id=config["env_ids"][0], seed=config["seeds"][0])
        for problem in validate_args(args):
            source = _source_of(problem, config=config, variant=variant)
            message = f"{source}: {problem}"
            if message not in problems:
                problems.append(message)
    return problems


def _video_problems(config: Mapping[str, Any]) -> list[str]:
    """video_env_ids must name configured tasks, and the videos are of final evaluations, so
    every variant must run one."""
    problems = [
        f"video_env_ids[{index}]: {env_id!r} is not one of env_ids "
        f"({', '.join(config['env_ids'])}); only a trained task can be filmed"
        for index, env_id in enumerate(config["video_env_ids"])
        if env_id not in config["env_ids"]
    ]
    if not config["video_env_ids"]:
        return problems
    for variant, overrides in config["variants"].items():
        if is_command_variant(config, variant=variant):
            continue  # a command's runs are not evaluated or filmed by sacbench
        if trainer_args(config, variant=variant).get("eval_episodes") == 0:
            source = f"variants.{variant}" if "eval_episodes" in overrides else "train"
            problems.append(
                f"{source}.eval_episodes: 0 runs no final evaluation, so variant {variant!r} "
                "has no video for video_env_ids (set it above 0, or empty video_env_ids)"
            )
    return problems


def _budget_problems(config: Mapping[str, Any]) -> list[str]:
    """Each variant's runs must log enough steady SPS points for the runtimes table, which would
    otherwise stop the workflow only after every run has trained."""
    problems: list[str] = []
    for variant in config["variants"]:
        if is_command_variant(config, variant=variant):
            args = {**config["train"], **command_args(config, variant=variant)}
            overridden = config["variants"][variant].get("args", {})
            prefix = f"variants.{variant}.args"
        else:
            args = trainer_args(config, variant=variant)
            overridden, prefix = config["variants"][variant], f"variants.{variant}"
        total, learning_starts = args["total_timesteps"], args["learning_starts"]
        logged = log_steps(learning_starts=learning_starts, total_timesteps=total)
        if len(logged) >= MIN_STEADY_SPS_POINTS:
            continue
        keys = [
            f"{prefix if name in overridden else 'train'}.{name}"
            for name in ("total_timesteps", "learning_starts")
        ]
        message = (
            f"{keys[0]} {total} with {keys[1]} {learning_starts}: the runtimes table's steady "
            f"SPS needs at least {MIN_STEADY_SPS_POINTS} {STEADY_SPS_TAG} points per run (one "
            f"every {LOG_EVERY} steps after learning_starts), these runs log {len(logged)}; "
            f"the smallest budget that works is total_timesteps "
            f"{smallest_tabulated_budget(learning_starts)}"
        )
        if largest_learning_starts(total) >= 0:
            message += f", or learning_starts at most {largest_learning_starts(total)}"
        if message not in problems:
            problems.append(message)
    return problems


def smallest_tabulated_budget(learning_starts: int) -> int:
    """The fewest total_timesteps whose runs log MIN_STEADY_SPS_POINTS log points."""
    first = log_steps(learning_starts=learning_starts, total_timesteps=learning_starts + 1).start
    return first + (MIN_STEADY_SPS_POINTS - 1) * LOG_EVERY + 1


def largest_learning_starts(total_timesteps: int) -> int:
    """The largest learning_starts with which a total_timesteps run logs MIN_STEADY_SPS_POINTS
    log points (negative when none does)."""
    last = (total_timesteps - 1) // LOG_EVERY * LOG_EVERY
    return last - (MIN_STEADY_SPS_POINTS - 1) * LOG_EVERY - 1


def _source_of(problem: str, *, config: Mapping[str, Any], variant: str) -> str:
    """The config key a trainer complaint ("--batch-size must ...") came from."""
    match = re.match(r"--([a-z-]+)", problem)
    if not match:
        return f"variants.{variant}"
    name = match.group(1).replace("-", "_")
    if name in config["variants"][variant]:
        return f"variants.{variant}.{name}"
    if name in config["train"]:
        return f"train.{name}"
    return f"variants.{variant}"


def default_args() -> dict[str, Any]:
    """The trainer's own defaults for the configurable arguments (the schema must match them)."""
    defaults = dataclasses.asdict(Args())
    return {name: defaults[name] for name in CONFIGURABLE_ARGS}

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

from sacbench.sac.args import ARG_NAMES, Args, validate_args
from sacbench.training.envs import ENV_SHAPES

# Trainer arguments the pipeline sets per job (from the run matrix and the profile), so a config
# may not set them.
PIPELINE_ARGS: frozenset[str] = frozenset(
    {"env_id", "seed", "exp_name", "run_dir", "threads", "overwrite"}
)
CONFIGURABLE_ARGS: tuple[str, ...] = tuple(name for name in ARG_NAMES if name not in PIPELINE_ARGS)

# A variant name becomes a directory name and a table column: no separators, no leading dot.
VARIANT_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

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
# Tasks not in the table (any other Gymnasium MuJoCo task) are timed as the slowest known one.
FALLBACK_STEPS_PER_SECOND = min(SLOW_STEPS_PER_SECOND.values())
# The limit asks for this many times the slow machine's training time: a busier or slower core,
# a slow file system, periodic checkpoints. A run that still hits the limit checkpoints and
# resumes in the next allocation (docs/slurm.md).
TIME_SAFETY_FACTOR = 1.5
# Interpreter, torch and MuJoCo start-up, and restoring a checkpoint (a replay buffer of
# several GB) when a run resumes.
STARTUP_MINUTES = 10
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
    problems = _schema_problems(filled, schema)
    if not problems:
        problems = _trainer_problems(filled)
    if problems:
        raise ConfigError(problems)
    return filled


def trainer_args(config: Mapping[str, Any], *, variant: str) -> dict[str, Any]:
    """The configurable trainer arguments of one variant, in the trainer's field order."""
    merged = {**config["train"], **config["variants"][variant]}
    return {name: merged[name] for name in CONFIGURABLE_ARGS if name in merged}


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
    """obs, next_obs, action, reward and termination per transition, all float32."""
    if env_id not in ENV_SHAPES:
        raise ValueError(f"no observation/action sizes known for env id {env_id!r}")
    if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size <= 0:
        raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
    observation_size, action_size = ENV_SHAPES[env_id]
    floats_per_transition = 2 * observation_size + action_size + 2
    return 4 * floats_per_transition * buffer_size


def train_memory_mb(*, env_id: str, buffer_size: int, attempt: int = 1) -> int:
    """Memory to request for one train job; each retry asks for one more share (an OOM retry)."""
    if not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
    buffer_mb = replay_buffer_bytes(env_id=env_id, buffer_size=buffer_size) / 2**20
    return attempt * math.ceil(buffer_mb + BASE_MEMORY_MB)


def slow_steps_per_second(env_id: str) -> float:
    """Training throughput assumed for `env_id` on one slow core (SLOW_STEPS_PER_SECOND)."""
    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(f"env_id must be a Gymnasium env id such as 'Hopper-v4', got {env_id!r}")
    task = re.sub(r"-v\d+$", "", env_id)
    return SLOW_STEPS_PER_SECOND.get(task, FALLBACK_STEPS_PER_SECOND)


def train_runtime_minutes(*, env_id: str, total_timesteps: int) -> int:
    """Wall-clock limit for one train job: start-up plus TIME_SAFETY_FACTOR times the training
    time at the task's slow throughput, at most MAX_TRAIN_RUNTIME_MINUTES."""
    if (
        not isinstance(total_timesteps, int)
        or isinstance(total_timesteps, bool)
        or total_timesteps <= 0
    ):
        raise ValueError(f"total_timesteps must be a positive integer, got {total_timesteps!r}")
    seconds = TIME_SAFETY_FACTOR * total_timesteps / slow_steps_per_second(env_id)
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


def _schema_problems(config: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path))):
        problems.extend(_describe(error))
    return problems


def _describe(error: jsonschema.ValidationError) -> list[str]:
    path = list(error.absolute_path)
    key = _key(path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        messages = []
        for extra in sorted(set(error.instance) - set(allowed)):
            if path and path[0] in ("train", "variants") and extra in PIPELINE_ARGS:
                messages.append(
                    f"{_key([*path, extra])}: {extra!r} is set by the pipeline for each run "
                    "(env_ids and seeds choose env_id and seed; threads come from the profile)"
                )
            elif path and path[0] in ("train", "variants"):
                messages.append(
                    f"{_key([*path, extra])}: {extra!r} is not a trainer argument; "
                    f"trainer arguments are: {', '.join(allowed)}"
                )
            else:
                messages.append(
                    f"{_key([*path, extra])}: unknown key {extra!r}; "
                    f"allowed keys here: {', '.join(allowed)}"
                )
        return messages
    if error.validator == "propertyNames" or (
        path[:1] == ["variants"] and error.validator == "pattern"
    ):
        return [
            f"variants: variant name {error.instance!r} cannot be a directory name "
            "(use letters, digits, '_', '-' and '.', starting with a letter or digit)"
        ]
    if error.validator == "enum" and path[:1] == ["env_ids"]:
        return [
            f"{key}: unknown env id {error.instance!r}; "
            f"the benchmark's tasks are: {', '.join(error.validator_value)}"
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


def _trainer_problems(config: Mapping[str, Any]) -> list[str]:
    """The trainer's own argument checks (e.g. cudagraphs needs compile) for every variant."""
    problems: list[str] = []
    for variant in config["variants"]:
        merged = trainer_args(config, variant=variant)
        args = Args(**merged, env_id=config["env_ids"][0], seed=config["seeds"][0])
        for problem in validate_args(args):
            source = _source_of(problem, config=config, variant=variant)
            message = f"{source}: {problem}"
            if message not in problems:
                problems.append(message)
    return problems


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

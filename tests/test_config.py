"""config.yaml validation, defaults and the per-job values the pipeline derives from it."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import gymnasium
import pytest
import yaml

from sacbench.pipeline.config import (
    COMMAND_PIPELINE_ARGS,
    CONFIGURABLE_ARGS,
    EVAL_STEPS_PER_SECOND,
    MAX_TRAIN_RUNTIME_MINUTES,
    PIPELINE_ARGS,
    SACBENCH_ONLY_ARGS,
    SECONDS_PER_FILMED_FRAME,
    SLOW_STEPS_PER_SECOND,
    STARTUP_MINUTES,
    TIME_SAFETY_FACTOR,
    ConfigError,
    command_args,
    command_words,
    default_args,
    evaluates,
    evaluation_seconds,
    is_command_variant,
    load_schema,
    run_budget,
    run_trainer_args,
    slow_steps_per_second,
    train_memory_mb,
    train_runtime_minutes,
    trainer_args,
    trainer_cli,
    validated_config,
)
from sacbench.sac.algorithm import update_schedule
from sacbench.sac.args import ARG_NAMES, CLEANRL_SAC_ARG_NAMES, Args
from sacbench.tags import MIN_STEADY_SPS_POINTS, log_steps
from sacbench.training.envs import BENCHMARK_ENV_IDS, EnvError, env_spaces

REPO = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")


def repo_config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def test_repo_config_is_the_full_reproduction():
    config = validated_config(repo_config(), schema=SCHEMA)
    assert config["env_ids"] == list(BENCHMARK_ENV_IDS)
    assert config["seeds"] == [1, 2, 3]
    assert list(config["variants"]) == ["sac_continuous_action"]
    assert trainer_args(config, variant="sac_continuous_action") == default_args()
    assert config["train"]["total_timesteps"] == 1_000_000


def test_schema_knows_every_configurable_trainer_argument_with_its_default():
    trainer_schema = SCHEMA["$defs"]["trainer_args"]["properties"]
    assert set(trainer_schema) == set(CONFIGURABLE_ARGS)
    assert {name: spec["default"] for name, spec in trainer_schema.items()} == default_args()
    assert SCHEMA["properties"]["env_ids"]["default"] == list(BENCHMARK_ENV_IDS)


def test_an_empty_config_gets_every_default():
    config = validated_config({}, schema=SCHEMA)
    assert config["env_ids"] == list(BENCHMARK_ENV_IDS)
    assert config["results_dir"] == "results"
    assert config["variants"] == {"sac_continuous_action": {}}
    assert config["report"] == {
        "last_episodes": 100,
        "bootstrap_resamples": 2000,
        "bootstrap_seed": 0,
        "allow_missing": False,
    }
    assert config["train"] == default_args()
    assert config["video_env_ids"] == []


def test_validation_does_not_modify_its_argument():
    raw = {"seeds": [4], "train": {"batch_size": 64}}
    before = copy.deepcopy(raw)
    validated_config(raw, schema=SCHEMA)
    assert raw == before


def test_variant_overrides_stay_sparse_and_win_over_train():
    config = validated_config(
        {
            "train": {"batch_size": 128, "gamma": 0.9},
            "variants": {"base": None, "big_batch": {"batch_size": 512}},
        },
        schema=SCHEMA,
    )
    assert config["variants"] == {"base": {}, "big_batch": {"batch_size": 512}}
    assert trainer_args(config, variant="base")["batch_size"] == 128
    big = trainer_args(config, variant="big_batch")
    assert big["batch_size"] == 512
    assert big["gamma"] == 0.9
    assert list(big) == [name for name in CONFIGURABLE_ARGS if name in big]


def test_documented_bf16_variant_is_a_valid_config_that_trains_with_bf16_products():
    page = (REPO / "docs" / "variants.md").read_text()
    (block,) = [
        text for text in re.findall(r"```yaml\n(.*?)```", page, flags=re.S) if "sac_bf16" in text
    ]
    config = validated_config(yaml.safe_load(block), schema=SCHEMA)
    assert "--precision bf16" in trainer_cli(trainer_args(config, variant="sac_bf16"))
    assert "--precision fp32" in trainer_cli(trainer_args(config, variant="sac_continuous_action"))


# (config, fragments every one of which the error must contain: the key and the bad value)
BAD_CONFIGS = {
    "unknown env id": ({"env_ids": ["Hopper-v4", "Ant-v9"]}, ["env_ids[1]", "'Ant-v9'"]),
    "misspelt env id": (
        {"env_ids": ["Hoper-v5"]},
        ["env_ids[0]", "'Hoper-v5'", "did you mean 'Hopper-v5'"],
    ),
    "discrete action space": (
        {"env_ids": ["Ant-v5", "CartPole-v1"]},
        ["env_ids[1]", "CartPole-v1", "Discrete action space"],
    ),
    "mujoco-py task": ({"env_ids": ["Ant-v3"]}, ["env_ids[0]", "Ant-v3", "cannot be made"]),
    "not a MuJoCo env": ({"env_ids": ["Pendulum-v1"]}, ["env_ids[0]", "Pendulum-v1", "MuJoCo"]),
    "env id not a directory name": (
        {"env_ids": ["ALE/Pong-v5"]},
        ["env_ids[0]", "'ALE/Pong-v5'", "directory name"],
    ),
    "empty env ids": ({"env_ids": []}, ["env_ids", "[]"]),
    "empty seeds": ({"seeds": []}, ["seeds", "[]"]),
    "duplicate seeds": ({"seeds": [1, 2, 2]}, ["seeds", "2", "duplicate"]),
    "non-integer seed": ({"seeds": [1, 1.5]}, ["seeds[1]", "1.5"]),
    "string seed": ({"seeds": ["one"]}, ["seeds[0]", "'one'"]),
    "seeds not a list": ({"seeds": 3}, ["seeds", "3"]),
    "zero steps": ({"train": {"total_timesteps": 0}}, ["train.total_timesteps", "0"]),
    "negative steps": ({"train": {"total_timesteps": -5}}, ["train.total_timesteps", "-5"]),
    "float steps": ({"train": {"total_timesteps": 1000.5}}, ["train.total_timesteps", "1000.5"]),
    "steps in e-notation": ({"train": {"total_timesteps": "1e6"}}, ["total_timesteps", "'1e6'"]),
    "zero batch size": ({"train": {"batch_size": 0}}, ["train.batch_size", "0"]),
    "float batch size": ({"train": {"batch_size": 2.5}}, ["train.batch_size", "2.5"]),
    "variant batch size": (
        {"variants": {"v": {"batch_size": -1}}},
        ["variants.v.batch_size", "-1"],
    ),
    "gamma above 1": ({"train": {"gamma": 1.5}}, ["train.gamma", "1.5"]),
    "gamma below 0": ({"train": {"gamma": -0.1}}, ["train.gamma", "-0.1"]),
    "tau above 1": ({"variants": {"v": {"tau": 2}}}, ["variants.v.tau", "2"]),
    "tau below 0": ({"train": {"tau": -1}}, ["train.tau", "-1"]),
    "unknown top-level key": ({"envs": ["Hopper-v4"]}, ["envs", "unknown key"]),
    "override not a trainer argument": (
        {"variants": {"v": {"batchsize": 64}}},
        ["variants.v.batchsize", "not a trainer argument"],
    ),
    "train key not a trainer argument": (
        {"train": {"learning_rate": 1e-3}},
        ["train.learning_rate", "not a trainer argument"],
    ),
    "pipeline-controlled argument": (
        {"variants": {"v": {"seed": 7}}},
        ["variants.v.seed", "set by the pipeline"],
    ),
    "variant name with a slash": ({"variants": {"a/b": {}}}, ["variants", "'a/b'"]),
    "variant name with a space": ({"variants": {"a b": {}}}, ["variants", "'a b'"]),
    "variant name dot-dot": ({"variants": {"..": {}}}, ["variants", "'..'"]),
    "no variants": ({"variants": {}}, ["variants", "{}"]),
    "variant overrides not a mapping": ({"variants": {"v": 3}}, ["variants.v", "3"]),
    "trainer's own cross-check": (
        {"variants": {"v": {"cudagraphs": True}}},
        ["variants.v.cudagraphs", "--compile"],
    ),
    "bad update path": ({"train": {"update_path": "turbo"}}, ["train.update_path", "'turbo'"]),
    "bad precision": ({"variants": {"v": {"precision": "fp16"}}}, ["variants.v.precision", "fp16"]),
    "bf16 on the reference path": (
        {"variants": {"v": {"precision": "bf16", "update_path": "reference"}}},
        ["variants.v", "--precision bf16", "--update-path fast"],
    ),
    "too few bootstrap resamples": (
        {"report": {"bootstrap_resamples": 10}},
        ["report.bootstrap_resamples", "10"],
    ),
    "unknown report key": ({"report": {"last_episode": 10}}, ["report.last_episode"]),
    "video of a task that is not trained": (
        {"env_ids": ["Hopper-v4"], "video_env_ids": ["Pusher-v4"]},
        ["video_env_ids[0]", "'Pusher-v4'", "not one of env_ids"],
    ),
    "video env ids not a list": ({"video_env_ids": "Hopper-v4"}, ["video_env_ids", "'Hopper-v4'"]),
    "video of a variant without a final evaluation": (
        {"video_env_ids": ["Hopper-v4"], "variants": {"a": {}, "b": {"eval_episodes": 0}}},
        ["variants.b.eval_episodes", "'b' has no video"],
    ),
    "negative eval frequency": ({"train": {"eval_frequency": -1}}, ["train.eval_frequency", "-1"]),
    "capture video without evaluation": (
        {"variants": {"v": {"eval_episodes": 0, "capture_video": True}}},
        ["variants.v", "--capture-video", "--eval-episodes"],
    ),
    "command variant with a trainer-only flag": (
        {"variants": {"c": {"command": "python x.py", "args": {"update_path": "fast"}}}},
        ["variants.c.args.update_path", "option of sacbench's trainer"],
    ),
    "command variant setting the seed": (
        {"variants": {"c": {"command": "python x.py", "args": {"seed": 2}}}},
        ["variants.c.args.seed", "set by the pipeline"],
    ),
    "empty command": ({"variants": {"c": {"command": ""}}}, ["variants.c.command", "''"]),
    "blank command": ({"variants": {"c": {"command": "  "}}}, ["variants.c.command", "'  '"]),
    "empty command list": ({"variants": {"c": {"command": []}}}, ["variants.c.command", "[]"]),
    "command list with an empty word": (
        {"variants": {"c": {"command": ["python", ""]}}},
        ["variants.c.command", "['python', '']"],
    ),
    "command with an unclosed quote": (
        {"variants": {"c": {"command": "python 'x.py"}}},
        ["variants.c.command", "closing quotation", '"python \'x.py"'],
    ),
    "command not a string": ({"variants": {"c": {"command": 5}}}, ["variants.c.command", "5"]),
    "trainer argument beside a command": (
        {"variants": {"c": {"command": "python x.py", "batch_size": 64}}},
        ["variants.c.batch_size", "go under variants.c.args"],
    ),
    "command flag name not an identifier": (
        {"variants": {"c": {"command": "python x.py", "args": {"Batch-Size": 1}}}},
        ["variants.c.args", "'Batch-Size'"],
    ),
    "command flag without a value": (
        {"variants": {"c": {"command": "python x.py", "args": {"num_envs": None}}}},
        ["variants.c.args.num_envs", "None"],
    ),
    "command flag shared with the trainer out of range": (
        {"variants": {"c": {"command": "python x.py", "args": {"total_timesteps": 0}}}},
        ["variants.c.args.total_timesteps", "0"],
    ),
    "inherit_train not a boolean": (
        {"variants": {"c": {"command": "python x.py", "inherit_train": "no"}}},
        ["variants.c.inherit_train", "'no'"],
    ),
}


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_bad_config_is_rejected_naming_the_key_and_value(name: str):
    bad, fragments = BAD_CONFIGS[name]
    config = {**repo_config(), **bad}
    with pytest.raises(ConfigError) as caught:
        validated_config(config, schema=SCHEMA)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from:\n{message}"


def test_every_problem_is_reported_at_once():
    config = {"seeds": [], "train": {"gamma": 3}, "bogus": 1, "env_ids": ["CartPole-v1"]}
    with pytest.raises(ConfigError) as caught:
        validated_config(config, schema=SCHEMA)
    assert len(caught.value.problems) == 4


def test_any_gymnasium_mujoco_task_with_a_box_action_space_is_accepted():
    env_ids = ["HalfCheetah-v5", "Ant-v5", "Swimmer-v4", "Reacher-v5", "HumanoidStandup-v5"]
    config = validated_config({"env_ids": env_ids}, schema=SCHEMA)
    assert config["env_ids"] == env_ids


def test_pipeline_arguments_are_the_trainer_flags_the_train_rule_sets():
    rule = (REPO / "workflow" / "rules" / "train.smk").read_text()
    shell = rule.split("shell:", 1)[1].split("\nrule ", 1)[0]
    flags = {flag.replace("-", "_") for flag in re.findall(r"--([a-z][a-z-]*)", shell)}
    assert flags == PIPELINE_ARGS
    assert set(ARG_NAMES) >= PIPELINE_ARGS


@pytest.mark.parametrize("name", sorted(PIPELINE_ARGS))
def test_a_config_that_sets_a_pipeline_argument_is_refused(name: str):
    value = getattr(Args(), name)
    for where, config in (
        ("train", {**repo_config(), "train": {name: value}}),
        ("variants.v", {**repo_config(), "variants": {"v": {name: value}}}),
    ):
        with pytest.raises(ConfigError) as caught:
            validated_config(config, schema=SCHEMA)
        assert f"{where}.{name}: {name!r} is set by the pipeline" in str(caught.value)


@pytest.mark.parametrize("name", sorted(SACBENCH_ONLY_ARGS))
def test_a_command_variant_may_not_set_a_trainer_only_option(name: str):
    value = getattr(Args(), name)
    config = {**repo_config(), "variants": {"c": {"command": "python x.py", "args": {name: value}}}}
    with pytest.raises(ConfigError) as caught:
        validated_config(config, schema=SCHEMA)
    assert f"variants.c.args.{name}: {name!r} is an option of sacbench's trainer" in str(
        caught.value
    )


def test_trainer_only_options_are_those_cleanrls_script_lacks():
    assert set(ARG_NAMES) - CLEANRL_SAC_ARG_NAMES == SACBENCH_ONLY_ARGS
    assert {"run_dir", "threads", "device", "checkpoint_interval", "update_path", "compile",
            "cudagraphs", "overwrite"} <= SACBENCH_ONLY_ARGS  # fmt: skip
    # The schema types every train key that a command variant's script also takes.
    command_schema = SCHEMA["$defs"]["command_variant"]["properties"]["args"]["properties"]
    assert set(command_schema) == set(CONFIGURABLE_ARGS) & CLEANRL_SAC_ARG_NAMES


def test_a_command_variant_gets_the_shared_train_keys_and_its_own_args():
    config = validated_config(
        {
            "train": {
                "total_timesteps": 5000,
                "learning_starts": 1000,
                "batch_size": 64,
                "update_path": "reference",
            },
            "variants": {
                "sac": {},
                "cleanrl": {
                    "command": "env A='b c' /opt/py /opt/cleanrl/sac.py",
                    "args": {"batch_size": 32, "num_envs": 1, "autotune": False},
                },
                "td3": {"command": ["/opt/py", "td3.py"], "inherit_train": False},
            },
        },
        schema=SCHEMA,
    )
    assert not is_command_variant(config, variant="sac")
    assert is_command_variant(config, variant="cleanrl")
    assert command_words(config["variants"]["cleanrl"]["command"]) == [
        "env", "A=b c", "/opt/py", "/opt/cleanrl/sac.py"
    ]  # fmt: skip
    args = command_args(config, variant="cleanrl")
    assert args["total_timesteps"] == 5000 and args["batch_size"] == 32
    assert args["num_envs"] == 1 and args["autotune"] is False
    shared = set(CONFIGURABLE_ARGS) & CLEANRL_SAC_ARG_NAMES
    # wandb_entity is null by default: left out, so the script keeps its own default.
    assert set(args) == (shared - {"wandb_entity"}) | {"num_envs"}
    assert command_args(config, variant="td3") == {}
    # Time and memory are sized from the budget the script gets, else from train's.
    assert run_budget(config, variant="cleanrl") == (5000, 1_000_000)
    assert run_budget(config, variant="td3") == (5000, 1_000_000)
    with pytest.raises(ValueError, match="'cleanrl' runs a command"):
        trainer_args(config, variant="cleanrl")
    with pytest.raises(ValueError, match="'sac' runs sacbench's trainer"):
        command_args(config, variant="sac")


def test_the_run_command_rule_sets_the_wrappers_pipeline_flags():
    from sacbench.pipeline.external import PIPELINE_FLAGS, parse_args

    assert set(PIPELINE_FLAGS) == COMMAND_PIPELINE_ARGS

    rule = (REPO / "workflow" / "rules" / "train.smk").read_text().split("rule run_command:")[1]
    shell = rule.split("shell:", 1)[1]
    flags = set(re.findall(r"--([a-z][a-z-]*)", shell.split(" -- ", 1)[0]))
    assert flags == {"run-dir", "env-id", "seed", "threads", "args-json"}
    options = parse_args(["--run-dir", "d", "--env-id", "E", "--seed", "1", "--", "python"])
    assert {name.replace("_", "-") for name in vars(options)} == flags | {"command"}


def test_trainer_cli_renders_booleans_as_flag_pairs_and_quotes_strings():
    flags = trainer_cli({"autotune": False, "compile": True, "batch_size": 64, "exp_name": "a b"})
    assert flags == "--no-autotune --compile --batch-size 64 --exp-name 'a b'"


def test_trainer_cli_round_trips_through_the_trainer_parser():
    tyro = pytest.importorskip("tyro")
    from sacbench.sac.args import Args

    config = validated_config(
        {"variants": {"v": {"autotune": False, "policy_lr": 1e-4, "update_path": "reference"}}},
        schema=SCHEMA,
    )
    args = trainer_args(config, variant="v")
    parsed = tyro.cli(Args, args=trainer_cli(args).split())
    for name, value in args.items():
        assert getattr(parsed, name) == value, name


def test_only_the_first_seed_of_a_video_task_is_filmed_and_its_flag_reaches_the_trainer():
    tyro = pytest.importorskip("tyro")
    config = validated_config(
        {"seeds": [3, 1], "video_env_ids": ["Pusher-v4"], "variants": {"a": {}, "b": {}}},
        schema=SCHEMA,
    )
    filmed = {
        (variant, env_id, seed)
        for variant in config["variants"]
        for env_id in config["env_ids"]
        for seed in ("3", "1")  # as Snakemake's wildcards give them
        if run_trainer_args(config, variant=variant, env_id=env_id, seed=seed).get("capture_video")
    }
    assert filmed == {("a", "Pusher-v4", "3"), ("b", "Pusher-v4", "3")}
    args = run_trainer_args(config, variant="a", env_id="Pusher-v4", seed=3)
    assert args == {**trainer_args(config, variant="a"), "capture_video": True}
    parsed = tyro.cli(Args, args=trainer_cli(args).split())
    assert parsed.capture_video and parsed.eval_episodes == 10 and parsed.eval_frequency == 0
    other = run_trainer_args(config, variant="a", env_id="Pusher-v4", seed=1)
    assert not tyro.cli(Args, args=trainer_cli(other).split()).capture_video


def test_the_runs_evaluate_unless_every_variant_turns_evaluation_off():
    assert evaluates(validated_config({}, schema=SCHEMA))  # the final evaluation, by default
    off = {"train": {"eval_episodes": 0}, "variants": {"a": {}, "b": {"eval_episodes": 3}}}
    assert evaluates(validated_config(off, schema=SCHEMA))
    del off["variants"]["b"]
    assert not evaluates(validated_config(off, schema=SCHEMA))


def test_trainer_cli_rejects_unknown_arguments():
    with pytest.raises(ValueError, match="batchsize"):
        trainer_cli({"batchsize": 3})


def test_memory_covers_the_float32_replay_buffer_plus_the_runtime():
    # Humanoid: 376 observation and 17 action floats; obs + next_obs + action + reward + done.
    buffer_bytes = 4 * (376 + 376 + 17 + 1 + 1) * 1_000_000
    expected = math.ceil(buffer_bytes / 2**20 + 1536)
    assert train_memory_mb(env_id="Humanoid-v4", buffer_size=1_000_000) == expected
    assert train_memory_mb(env_id="Humanoid-v4", buffer_size=1_000_000, attempt=2) == 2 * expected
    small = train_memory_mb(env_id="InvertedPendulum-v4", buffer_size=1_000_000)
    assert 1536 < small < expected


@pytest.mark.parametrize(
    ("env_id", "observation_size", "action_size"),
    [("Ant-v5", 105, 8), ("Ant-v4", 27, 8), ("HumanoidStandup-v5", 348, 17), ("Swimmer-v4", 8, 2)],
)
def test_memory_of_any_task_comes_from_its_spaces(
    env_id: str, observation_size: int, action_size: int
):
    # The sizes Gymnasium 1.4's envs declare (Ant-v5 observes its contact forces, Ant-v4 not).
    env = gymnasium.make(env_id)
    assert env.observation_space.shape == (observation_size,)
    assert env.action_space.shape == (action_size,)
    env.close()
    buffer_bytes = 4 * (2 * observation_size + action_size + 2) * 200_000
    assert train_memory_mb(env_id=env_id, buffer_size=200_000) == math.ceil(
        buffer_bytes / 2**20 + 1536
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"env_id": "Ant-v9", "buffer_size": 10},
        {"env_id": "CartPole-v1", "buffer_size": 10},
        {"env_id": "Hopper-v4", "buffer_size": 0},
        {"env_id": "Hopper-v4", "buffer_size": 10, "attempt": 0},
    ],
)
def test_memory_rejects_bad_arguments(kwargs: dict[str, Any]):
    with pytest.raises(ValueError):
        train_memory_mb(**kwargs)


def test_time_limit_is_startup_plus_safety_times_the_slow_training_time():
    for env_id in BENCHMARK_ENV_IDS:
        throughput = SLOW_STEPS_PER_SECOND[env_id.removesuffix("-v4")]
        training_minutes = TIME_SAFETY_FACTOR * 1_000_000 / throughput / 60
        assert train_runtime_minutes(env_id=env_id, total_timesteps=1_000_000) == (
            STARTUP_MINUTES + math.ceil(training_minutes)
        ), env_id
    # The figures docs/slurm.md quotes: 1M steps at 36 and 22 steps/s, times 1.5, plus 10 min.
    assert train_runtime_minutes(env_id="HalfCheetah-v4", total_timesteps=1_000_000) == 705
    assert train_runtime_minutes(env_id="Humanoid-v4", total_timesteps=1_000_000) == 1147
    # A smoke-sized run of 2,000 steps: mostly start-up.
    assert train_runtime_minutes(env_id="Hopper-v4", total_timesteps=2000) == 12


def test_evaluations_and_videos_lengthen_the_time_limit():
    config = validated_config({}, schema=SCHEMA)
    args = trainer_args(config, variant="sac_continuous_action")
    # The default: one final evaluation of 10 episodes of at most 1000 steps, a few seconds,
    # which leaves the default benchmark's limits as they were.
    assert evaluation_seconds(args, env_id="HalfCheetah-v4") == 10 * 1000 / EVAL_STEPS_PER_SECOND
    default = train_runtime_minutes(
        env_id="HalfCheetah-v4",
        total_timesteps=1_000_000,
        evaluation_seconds=evaluation_seconds(args, env_id="HalfCheetah-v4"),
    )
    assert default == 705
    assert evaluation_seconds({**args, "eval_episodes": 0}, env_id="HalfCheetah-v4") == 0
    # Every 10k steps (99 evaluations, then the final one), each first episode filmed.
    busy = {**args, "eval_frequency": 10_000, "capture_video": True}
    expected = 100 * (10 * 1000 / EVAL_STEPS_PER_SECOND + 1000 * SECONDS_PER_FILMED_FRAME)
    assert evaluation_seconds(busy, env_id="HalfCheetah-v4") == pytest.approx(expected)
    assert train_runtime_minutes(
        env_id="HalfCheetah-v4", total_timesteps=1_000_000, evaluation_seconds=expected
    ) == STARTUP_MINUTES + math.ceil(TIME_SAFETY_FACTOR * (1e6 / 36 + expected) / 60)
    # Pusher's episodes end after 100 steps.
    assert evaluation_seconds(busy, env_id="Pusher-v4") == pytest.approx(expected / 10)


def test_time_limits_differ_per_task_and_humanoid_gets_the_most():
    limits = {
        env_id: train_runtime_minutes(env_id=env_id, total_timesteps=1_000_000)
        for env_id in BENCHMARK_ENV_IDS
    }
    assert max(limits, key=limits.get) == "Humanoid-v4"
    assert limits["Humanoid-v4"] > 1.5 * limits["HalfCheetah-v4"]
    # CleanRL's published runs took ~175 min per 1M steps on GPU nodes; a CPU core needs far more.
    assert min(limits.values()) > 3 * 175
    # Under a day, so that the default benchmark fits the commonest partition limit.
    assert max(limits.values()) < MAX_TRAIN_RUNTIME_MINUTES


def test_every_benchmark_task_has_a_measured_throughput():
    assert {env_id.removesuffix("-v4") for env_id in BENCHMARK_ENV_IDS} == set(
        SLOW_STEPS_PER_SECOND
    )


def test_other_versions_share_their_tasks_measured_limit():
    assert train_runtime_minutes(env_id="Humanoid-v5", total_timesteps=500_000) == (
        train_runtime_minutes(env_id="Humanoid-v4", total_timesteps=500_000)
    )
    assert slow_steps_per_second("Hopper-v5") == SLOW_STEPS_PER_SECOND["Hopper"]


def test_unmeasured_tasks_are_timed_from_their_sizes():
    """Seconds per step on the line through HalfCheetah-v4 (17 + 6 floats, 36/s) and
    Humanoid-v4 (376 + 17 floats, 22/s), never faster than the small tasks."""

    def by_hand(input_floats: int) -> float:
        per_float = (1 / 22 - 1 / 36) / (393 - 23)
        return 1 / (1 / 36 + per_float * max(input_floats - 23, 0))

    for env_id, input_floats in [
        ("Ant-v5", 105 + 8),
        ("Ant-v4", 27 + 8),
        ("HumanoidStandup-v5", 348 + 17),
        ("Swimmer-v4", 8 + 2),
        ("Reacher-v5", 10 + 2),
    ]:
        assert slow_steps_per_second(env_id) == pytest.approx(by_hand(input_floats)), env_id
    assert slow_steps_per_second("Swimmer-v4") == 36.0
    assert slow_steps_per_second("HumanoidStandup-v4") == pytest.approx(22.0)  # Humanoid's size
    rates = [slow_steps_per_second(env_id) for env_id in ("Swimmer-v4", "Ant-v5", "Humanoid-v4")]
    assert rates == sorted(rates, reverse=True)
    assert train_runtime_minutes(env_id="Ant-v5", total_timesteps=1_000_000) == (
        STARTUP_MINUTES + math.ceil(TIME_SAFETY_FACTOR * 1_000_000 / by_hand(113) / 60)
    )


def test_time_limit_of_an_unusable_task_names_it():
    with pytest.raises(EnvError, match="CartPole-v1 has a Discrete action space"):
        slow_steps_per_second("CartPole-v1")
    assert env_spaces("Swimmer-v4").observation_size == 8


def test_time_limit_grows_with_the_budget_up_to_the_cap():
    limits = [
        train_runtime_minutes(env_id="Hopper-v4", total_timesteps=steps)
        for steps in (1, 10_000, 100_000, 1_000_000, 3_000_000, 10_000_000)
    ]
    assert limits == sorted(limits)
    assert limits[0] == STARTUP_MINUTES + 1
    assert limits[3] < limits[4] == MAX_TRAIN_RUNTIME_MINUTES == limits[5] == 24 * 60


@pytest.mark.parametrize("total_timesteps", [0, -5, 1.5, True, "1000", None])
def test_time_limit_rejects_a_bad_step_count_naming_it(total_timesteps: Any):
    with pytest.raises(ValueError, match=f"total_timesteps.*{re.escape(repr(total_timesteps))}"):
        train_runtime_minutes(env_id="Hopper-v4", total_timesteps=total_timesteps)


@pytest.mark.parametrize("env_id", ["", "  ", None, 4])
def test_time_limit_rejects_a_bad_env_id_naming_it(env_id: Any):
    with pytest.raises(ValueError, match=f"env_id.*{re.escape(repr(env_id))}"):
        train_runtime_minutes(env_id=env_id, total_timesteps=1000)


def test_tracking_keys_become_the_trainer_tracking_flags():
    tyro = pytest.importorskip("tyro")
    config = validated_config(
        {
            "train": {"wandb_project_name": "bench", "wandb_entity": "my-team"},
            "variants": {"plain": {}, "tracked": {"track": True}},
        },
        schema=SCHEMA,
    )
    flags = {name: trainer_cli(trainer_args(config, variant=name)) for name in ("plain", "tracked")}
    assert "--no-track --wandb-project-name bench --wandb-entity my-team" in flags["plain"]
    assert "--track --wandb-project-name bench --wandb-entity my-team" in flags["tracked"]
    parsed = tyro.cli(Args, args=flags["tracked"].split())
    assert (parsed.track, parsed.wandb_project_name, parsed.wandb_entity) == (
        True,
        "bench",
        "my-team",
    )


def test_by_default_runs_are_not_tracked_and_a_null_entity_gives_no_flag():
    config = validated_config(repo_config(), schema=SCHEMA)
    flags = trainer_cli(trainer_args(config, variant="sac_continuous_action"))
    assert "--no-track --wandb-project-name sacbench" in flags
    assert "--wandb-entity" not in flags


def test_a_bad_wandb_project_name_or_entity_names_its_key():
    with pytest.raises(ConfigError) as caught:
        validated_config({"train": {"wandb_project_name": "team/project"}}, schema=SCHEMA)
    assert caught.value.problems[0].startswith("train.wandb_project_name: --wandb-project-name")
    with pytest.raises(ConfigError) as caught:
        validated_config({"variants": {"v": {"wandb_entity": ""}}}, schema=SCHEMA)
    assert caught.value.problems[0].startswith("variants.v.wandb_entity:")


# ---- a budget the tables can use ----------------------------------------------------------------


def test_log_steps_are_the_update_schedules_log_points():
    """The config check counts a run's log points with tags.log_steps: the steps at which the
    loop's schedule logs charts/steady_SPS."""
    for learning_starts, total in [(0, 350), (99, 401), (100, 401), (1000, 1200), (1000, 1201)]:
        logged = [
            step
            for step in range(total)
            if update_schedule(
                step, learning_starts=learning_starts, policy_frequency=2,
                target_network_frequency=1,
            ).log
        ]  # fmt: skip
        assert list(log_steps(learning_starts=learning_starts, total_timesteps=total)) == logged


def test_a_budget_too_small_for_the_runtimes_table_is_refused_naming_the_smallest_that_works():
    tiny = {**repo_config(), "train": {"total_timesteps": 1200, "learning_starts": 1000}}
    with pytest.raises(ConfigError) as caught:
        validated_config(tiny, schema=SCHEMA)
    (problem,) = caught.value.problems
    assert problem.startswith("train.total_timesteps 1200 with train.learning_starts 1000: ")
    assert f"at least {MIN_STEADY_SPS_POINTS} charts/steady_SPS points" in problem
    assert problem.endswith(
        "these runs log 1; the smallest budget that works is total_timesteps 1201, "
        "or learning_starts at most 999"
    )
    # Each way out that the message names passes the check.
    validated_config({**tiny, "train": {"total_timesteps": 1201, "learning_starts": 1000}},
                     schema=SCHEMA)  # fmt: skip
    validated_config({**tiny, "train": {"total_timesteps": 1200, "learning_starts": 999}},
                     schema=SCHEMA)  # fmt: skip


def test_a_too_small_budget_is_named_by_the_key_that_sets_it():
    config = {
        **repo_config(),
        "variants": {
            "short": {"total_timesteps": 150},
            "cleanrl": {"command": "python x.py", "args": {"learning_starts": 4950}},
        },
        "train": {"total_timesteps": 5000, "learning_starts": 100},
    }
    with pytest.raises(ConfigError) as caught:
        validated_config(config, schema=SCHEMA)
    short, cleanrl = caught.value.problems
    # At most one log point fits in 150 steps: no learning_starts is a way out.
    assert short.startswith("variants.short.total_timesteps 150 with train.learning_starts 100")
    assert short.endswith("log 0; the smallest budget that works is total_timesteps 301")
    assert cleanrl.startswith(
        "train.total_timesteps 5000 with variants.cleanrl.args.learning_starts 4950"
    )
    assert cleanrl.endswith("log 0; the smallest budget that works is total_timesteps 5101, "
                            "or learning_starts at most 4799")  # fmt: skip

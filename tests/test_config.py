"""config.yaml validation, defaults and the per-job values the pipeline derives from it."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sacbench.config import (
    CONFIGURABLE_ARGS,
    MAX_TRAIN_RUNTIME_MINUTES,
    PIPELINE_ARGS,
    SLOW_STEPS_PER_SECOND,
    STARTUP_MINUTES,
    TIME_SAFETY_FACTOR,
    ConfigError,
    default_args,
    load_schema,
    slow_steps_per_second,
    train_memory_mb,
    train_runtime_minutes,
    trainer_args,
    trainer_cli,
    validated_config,
)
from sacbench.sac.args import ARG_NAMES, Args
from sacbench.training.envs import BENCHMARK_ENV_IDS, ENV_SHAPES

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
    assert SCHEMA["properties"]["env_ids"]["items"]["enum"] == list(BENCHMARK_ENV_IDS)
    assert set(ENV_SHAPES) >= set(BENCHMARK_ENV_IDS)


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


# (config, fragments every one of which the error must contain: the key and the bad value)
BAD_CONFIGS = {
    "unknown env id": ({"env_ids": ["Hopper-v4", "Ant-v9"]}, ["env_ids[1]", "'Ant-v9'"]),
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
    "too few bootstrap resamples": (
        {"report": {"bootstrap_resamples": 10}},
        ["report.bootstrap_resamples", "10"],
    ),
    "unknown report key": ({"report": {"last_episode": 10}}, ["report.last_episode"]),
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
    config = {"seeds": [], "train": {"gamma": 3}, "bogus": 1}
    with pytest.raises(ConfigError) as caught:
        validated_config(config, schema=SCHEMA)
    assert len(caught.value.problems) == 3


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
    "kwargs",
    [
        {"env_id": "Ant-v4", "buffer_size": 10},
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
    # The smoke preset's 2,000 steps: mostly start-up.
    assert train_runtime_minutes(env_id="Hopper-v4", total_timesteps=2000) == 12


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


def test_other_versions_share_their_tasks_limit_and_unknown_tasks_get_the_slowest():
    assert train_runtime_minutes(env_id="Humanoid-v5", total_timesteps=500_000) == (
        train_runtime_minutes(env_id="Humanoid-v4", total_timesteps=500_000)
    )
    assert slow_steps_per_second("Hopper-v5") == SLOW_STEPS_PER_SECOND["Hopper"]
    # Ant, Swimmer, HumanoidStandup, ...: not measured, so timed as the slowest measured task.
    for env_id in ("Ant-v4", "HumanoidStandup-v5", "Swimmer-v4"):
        assert slow_steps_per_second(env_id) == min(SLOW_STEPS_PER_SECOND.values()), env_id
        assert train_runtime_minutes(env_id=env_id, total_timesteps=1_000_000) == (
            train_runtime_minutes(env_id="Humanoid-v4", total_timesteps=1_000_000)
        )


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

# Helpers for the rules: config validation, the run matrix, input functions, resources.
# The logic lives in sacbench/pipeline/config.py (unit-tested); this file only adapts it to Snakemake.
import gc
import json
import os
import re
import shlex
from pathlib import Path

from sacbench import published
from sacbench.pipeline import config as sacbench_config
from sacbench.pipeline import local_resources
from sacbench.results.runs import EXTRACTION_FORMAT

config.update(
    sacbench_config.validated_config(
        config,
        schema=sacbench_config.load_schema(
            workflow.source_path("../schemas/config.schema.yaml")
        ),
    )
)

# profiles/default (the workflow profile) sets `cores: all` so that a plain `snakemake TARGET`
# runs locally, and local runs get a default memory total (Snakemake enforces only resources
# that have one), so train jobs queue instead of being killed hours in; --resources mem_mb=N
# replaces it. Neither may reach a Slurm run: Snakemake applies the workflow profile on top of
# --profile profiles/slurm, where the submit host's cores and memory would cap what jobs on the
# cluster's nodes ask for. While this file is read Snakemake has not chosen its executor yet,
# so profiles/slurm says so through SACBENCH_EXECUTOR. The Snakemake that runs each job inside
# its allocation (not the main process) is given its resources and needs no default.
ON_SLURM = os.environ.get("SACBENCH_EXECUTOR") == "slurm"
LOCAL_MEMORY_TOTAL = workflow.is_main_process and not ON_SLURM
if ON_SLURM and workflow.is_main_process:
    workflow.global_resources["_cores"] = None
    workflow.resource_settings.cores = None
elif LOCAL_MEMORY_TOTAL and workflow.global_resources.get("mem_mb").value is None:
    workflow.global_resources["mem_mb"] = local_resources.default_memory_budget_mb(
        available_mb=local_resources.available_memory_mb()
    )

RESULTS = config["results_dir"]
VARIANTS = list(config["variants"])
ENV_IDS = list(config["env_ids"])
SEEDS = [str(seed) for seed in config["seeds"]]
# Tasks whose final evaluation the report shows as a video, filmed in the first seed's run.
VIDEO_ENV_IDS = list(config["video_env_ids"])
# Variants that run an external command instead of sacbench's trainer (train.smk's run_command).
COMMAND_VARIANTS = [
    name
    for name in VARIANTS
    if sacbench_config.is_command_variant(config, variant=name)
]
TRAINER_VARIANTS = [name for name in VARIANTS if name not in COMMAND_VARIANTS]


def one_of(names):
    """A wildcard constraint that matches exactly `names` (nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "(?!)"


wildcard_constraints:
    variant="|".join(re.escape(name) for name in VARIANTS),
    env_id="|".join(re.escape(env_id) for env_id in ENV_IDS),
    seed=r"\d+",


def results(path):
    """A path under the configured results folder (default results/)."""
    return f"{RESULTS}/{path}"


def run_matrix_paths(pattern):
    """`pattern` (under results/) for every variant x env x seed of the config."""
    return expand(results(pattern), variant=VARIANTS, env_id=ENV_IDS, seed=SEEDS)


def extracted_tables(wildcards):
    return run_matrix_paths("extracted/{variant}/{env_id}/{seed}.csv")


def extracted_summaries(wildcards):
    return run_matrix_paths("extracted/{variant}/{env_id}/{seed}.json")


def run_dir_of_output(wildcards, output):
    """A train job's run dir: the folder holding its completion record."""
    return str(Path(output.complete).parent)


def run_dir_of_input(wildcards, input):
    return str(Path(input.complete).parent)


def extracted_dir(wildcards, input):
    """results/extracted, from an input table results/extracted/{variant}/{env_id}/{seed}.csv."""
    return str(Path(input.tables[0]).parents[2])


def plots_dir(wildcards, output):
    return str(Path(output[0]).parent)


def filmed_run_completion(wildcards):
    """The completion record of the run whose final evaluation is filmed for the report."""
    return results(
        f"runs/{wildcards.variant}/{wildcards.env_id}/{SEEDS[0]}/complete.json"
    )


def trainer_flags(wildcards):
    """The run's trainer arguments as flags (its variant's, and --capture-video for a run the
    report shows a video of); a params entry, so changing one re-runs exactly the runs of the
    variants it affects."""
    args = sacbench_config.run_trainer_args(
        config, variant=wildcards.variant, env_id=wildcards.env_id, seed=wildcards.seed
    )
    return sacbench_config.trainer_cli(args)


def command_line(wildcards):
    """A command variant's program and first arguments, shell-quoted; a params entry, so a
    changed command re-runs exactly that variant's runs."""
    command = config["variants"][wildcards.variant]["command"]
    return shlex.join(sacbench_config.command_words(command))


def command_args_json(wildcards):
    """A command variant's script flags by name, as shell-quoted JSON; a params entry."""
    args = sacbench_config.command_args(config, variant=wildcards.variant)
    return shlex.quote(json.dumps(args))


def train_mem_mb(wildcards, attempt):
    """The run's memory; locally, a run that can never fit the total fails before it starts.
    A command variant's script is sized as the trainer with its buffer_size."""
    _, buffer_size = sacbench_config.run_budget(config, variant=wildcards.variant)
    need = sacbench_config.train_memory_mb(
        env_id=wildcards.env_id, buffer_size=buffer_size, attempt=attempt
    )
    if not LOCAL_MEMORY_TOTAL:
        return need
    return local_resources.check_job_fits(
        run=f"{wildcards.variant}/{wildcards.env_id}/{wildcards.seed}",
        need_mb=need,
        total_mb=workflow.global_resources.get("mem_mb").value,
        attempt=attempt,
    )


def train_runtime(wildcards):
    """The run's time limit in minutes, from its task's throughput, its number of steps and,
    for the trainer's runs, its evaluations (and videos)."""
    if sacbench_config.is_command_variant(config, variant=wildcards.variant):
        total_timesteps, _ = sacbench_config.run_budget(
            config, variant=wildcards.variant
        )
        return sacbench_config.train_runtime_minutes(
            env_id=wildcards.env_id, total_timesteps=total_timesteps
        )
    args = sacbench_config.run_trainer_args(
        config, variant=wildcards.variant, env_id=wildcards.env_id, seed=wildcards.seed
    )
    return sacbench_config.train_runtime_minutes(
        env_id=wildcards.env_id,
        total_timesteps=args["total_timesteps"],
        evaluation_seconds=sacbench_config.evaluation_seconds(
            args, env_id=wildcards.env_id
        ),
    )


def selection_flags():
    """Which runs the tables and plots cover, in the config's order."""
    return " ".join(
        [
            "--variants",
            *VARIANTS,
            "--env-ids",
            *ENV_IDS,
            "--seeds",
            *SEEDS,
        ]
    )


def statistics_flags():
    """The returns and aggregate tables' --last-episodes and --bootstrap-* flags."""
    report_config = config["report"]
    return (
        f"--last-episodes {report_config['last_episodes']}"
        f" --bootstrap-resamples {report_config['bootstrap_resamples']}"
        f" --bootstrap-seed {report_config['bootstrap_seed']}"
    )


def allow_missing_flag():
    return "--allow-missing" if config["report"]["allow_missing"] else ""


# The figures of the plots rule, each with its report caption (sacbench.results.plots.FIGURES
# has them all). The evaluation figure is drawn only when the runs evaluate, and the aggregate's
# (interval estimates, performance profile) only when some task has the published pr-424 return a
# normalised score needs. One job draws them all, as each `report plots` process pays about
# 0.8 s of imports (matplotlib, pandas) before it draws anything.
PLOT_CAPTIONS = {
    "sac": "sac_plot.rst",
    "sac-time": "sac_time_plot.rst",
    "sac-sps": "sac_sps_plot.rst",
    "sac-eval": "sac_eval_plot.rst",
    "sac-aggregate": "sac_aggregate_plot.rst",
    "sac-profile": "sac_profile_plot.rst",
}


def plot_names():
    names = ["sac", "sac-time", "sac-sps"]
    if sacbench_config.evaluates(config):
        names.append("sac-eval")
    if any(env_id in published.PR424 for env_id in ENV_IDS):
        names.extend(["sac-aggregate", "sac-profile"])
    return names


def plot_outputs():
    """The plots rule's outputs: each figure's PNG, shown in the report, and its SVG."""
    outputs = {}
    for name in plot_names():
        outputs[f"{name}_png"] = report(
            results(f"plots/{name}.png"),
            caption=f"../report/{PLOT_CAPTIONS[name]}",
            category="Plots",
        )
        outputs[f"{name}_svg"] = results(f"plots/{name}.svg")
    return outputs


def video_targets():
    """Each video the report shows."""
    return expand(
        results("videos/{variant}/{env_id}.{ext}"),
        variant=TRAINER_VARIANTS,  # a command variant's runs are not filmed
        env_id=VIDEO_ENV_IDS,
        ext=["mp4", "html"],
    )


def all_targets(wildcards):
    return [
        results("sac_runtimes.md"),
        results("sac_runtimes.csv"),
        results("sac.md"),
        results("sac.csv"),
        results("sac_aggregate.md"),
        results("sac_aggregate.csv"),
        *expand(results("{stem}.html"), stem=["sac_runtimes", "sac", "sac_aggregate"]),
        *expand(results("plots/{name}.{ext}"), name=plot_names(), ext=["png", "svg"]),
        *video_targets(),
    ]


# Everything made so far (Snakemake's, pandas', MuJoCo's objects, this workflow's) is kept out of
# the garbage collector's sweeps, the one at Python's shutdown included: each `snakemake` command
# takes about a sixth less CPU (docs/performance.md, "Process starts and exits").
gc.freeze()

"""sacbench through a real Slurm cluster: the single-node cluster of scripts/slurm-cluster.sh,
Snakemake's Slurm executor with profiles/slurm, the real trainer.

Every Slurm job pays two nested Snakemake start-ups, so the budgets are small: the smoke
preset (six tasks, 1,400 steps each) through the documented command exactly as written, one
short run for preemption, a few hundred steps for failures, and runs that never start (dry
runs, a submission Slurm refuses). The cluster is started once for this file and stopped after
its last test (unless it was already running), while other files' tests still run. Without the
Slurm binaries the tests are skipped, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from sacbench.events import read_run_scalars
from sacbench.pipeline.config import (
    evaluation_seconds,
    load_schema,
    replay_buffer_bytes,
    run_trainer_args,
    train_memory_mb,
    train_runtime_minutes,
    validated_config,
)
from sacbench.tags import CLOCK_TAGS, EVAL_EPISODE_TAGS
from tests.slurm_cluster import (
    REPO,
    TEST_CLUSTER_ENV,
    Request,
    SlurmObservations,
    Submission,
    cluster,
    missing_binaries,
    next_job_id,
    run_snakemake,
    run_verbatim,
    smoke_preset,
    snakemake_command,
    snakemake_env,
    submissions,
    wait_for,
    watch_squeue,
    workflow_copy,
    write_yaml,
)
from tests.trainer_runs import process_runs
from tests.workflow_copies import smoke_preset_run

pytestmark = pytest.mark.slurm

VARIANT = "sac_continuous_action"
# The command docs/slurm.md gives; it runs with TEST_CLUSTER_ENV, the settings docs/slurm.md tells
# users of the test cluster to make: squeue, as it has no accounting (no sacct), and a short
# status interval for jobs of seconds.
SLURM_COMMAND = "snakemake --profile profiles/slurm"
# The whole smoke preset (all six tasks, one seed): 6 train jobs on Slurm; extraction, tables
# and plots on the submit host.
SMOKE = smoke_preset()
SMOKE_ENV_IDS = SMOKE["env_ids"]
SMOKE_TABLES = ("sac.csv", "sac_runtimes.csv", "sac_aggregate.csv")
SMOKE_TARGETS = [
    *SMOKE_TABLES,
    "sac.md",
    "sac_runtimes.md",
    "sac_aggregate.md",
    *[
        f"plots/{name}.{ext}"
        for name in ("sac", "sac-time", "sac-sps", "sac-eval")
        for ext in ("png", "svg")
    ],
    f"videos/{VARIANT}/InvertedPendulum-v4.mp4",
]


def smoke_time_limit(env_id: str) -> int:
    """A smoke train job's time limit: its steps and its evaluations (InvertedPendulum's filmed)."""
    schema = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")
    args = run_trainer_args(
        validated_config(SMOKE, schema=schema), variant=VARIANT, env_id=env_id, seed=1
    )
    return train_runtime_minutes(
        env_id=env_id,
        total_timesteps=args["total_timesteps"],
        evaluation_seconds=evaluation_seconds(args, env_id=env_id),
    )


@pytest.fixture(scope="module")
def slurm_cluster():
    missing = missing_binaries()
    if missing:
        message = f"Slurm binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must run the Slurm tests")
        pytest.skip(message)
    already_running = cluster("status").returncode == 0
    started = cluster("start")
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    if not already_running:
        stopped = cluster("stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def workdir_with_config(root: Path, *overrides: dict) -> Path:
    """A workdir holding the repo's config.yaml (the Snakefile's configfile) and the given
    overrides as config/test-*.yaml, each to be passed with --configfile."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "config.yaml", root / "config.yaml")
    shutil.copytree(REPO / "config", root / "config")
    for index, override in enumerate(overrides):
        write_yaml(root / "config" / f"test-{index}.yaml", override)
    return root


def configfiles(workdir: Path, *names: str) -> list[str]:
    """--configfile takes every following argument: pass these last."""
    return ["--configfile", *[str(workdir / "config" / name) for name in names]]


def run_dir(workdir: Path, results: str, env_id: str, seed: int = 1, variant: str = VARIANT):
    return workdir / results / "runs" / variant / env_id / str(seed)


def comparable_scalars(path: Path) -> pd.DataFrame:
    """A run's scalars without wall times and without the scalars that measure time."""
    scalars = read_run_scalars(path)
    untimed = scalars[~scalars["tag"].isin(list(CLOCK_TAGS))]
    return untimed[["tag", "step", "value"]].reset_index(drop=True)


def slurm_log_text(submission: Submission) -> str:
    return submission.log.read_text(errors="replace")


# ---- the smoke workflow ------------------------------------------------------------------------


@dataclass
class SmokeRuns:
    on_slurm: Path
    local: Path
    output: str
    seen: SlurmObservations
    slurm_ids: list[int]


@pytest.fixture(scope="module")
def smoke_runs(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> SmokeRuns:
    """The smoke preset once through `snakemake --profile profiles/slurm`, typed as docs/slurm.md
    gives it in a copy of the workflow whose config.yaml is the smoke preset, and once locally,
    side by side: the README's smoke command, whose run tests/test_readme.py shares."""
    on_slurm = workflow_copy(tmp_path_factory.mktemp("slurm-smoke") / "sacbench", SMOKE)
    with ThreadPoolExecutor(max_workers=1) as local_runner:
        local_run = local_runner.submit(smoke_preset_run, tmp_path_factory)
        started = time.monotonic()
        first_id = next_job_id()
        with watch_squeue() as seen:
            slurm_run = run_verbatim(on_slurm, SLURM_COMMAND, **TEST_CLUSTER_ENV)
        slurm_ids = list(range(first_id, next_job_id()))
        elapsed = time.monotonic() - started
        local = local_run.result(timeout=900)
    print(f"\n`{SLURM_COMMAND}`, smoke preset ({len(SMOKE_ENV_IDS)} tasks): {elapsed:.0f} s")
    assert slurm_run.returncode == 0, slurm_run.stdout + slurm_run.stderr
    return SmokeRuns(on_slurm, local, slurm_run.stdout + slurm_run.stderr, seen, slurm_ids)


def test_smoke_workflow_runs_every_train_job_as_a_slurm_job(smoke_runs: SmokeRuns):
    """`snakemake --profile profiles/slurm`, typed as docs/slurm.md gives it, submits one Slurm
    job per train run and nothing else."""
    on_slurm, output, seen = smoke_runs.on_slurm, smoke_runs.output, smoke_runs.seen
    train_runs = [f"{VARIANT}_{env_id}_1" for env_id in SMOKE_ENV_IDS]
    # Slurm's own count: the job ids slurmctld handed out while the command ran.
    assert len(smoke_runs.slurm_ids) == len(train_runs) == 6, smoke_runs.slurm_ids
    # ...and they are exactly the executor's submissions, each a train run.
    jobs = submissions(output)
    print("Slurm job ids:", {job.slurm_id: (job.rule, job.wildcards) for job in jobs})
    assert sorted(int(job.slurm_id) for job in jobs) == smoke_runs.slurm_ids, output
    assert {job.rule for job in jobs} == {"train"}, output
    train_jobs = {job.wildcards: job for job in jobs}
    assert sorted(train_jobs) == sorted(train_runs)
    for wildcards, job in train_jobs.items():
        env_id = wildcards.removeprefix(f"{VARIANT}_").removesuffix("_1")
        # squeue saw the job run and finish under the comment the executor gave it...
        assert seen.comments[job.slurm_id] == f"rule_train_wildcards_{wildcards}"
        assert "RUNNING" in seen.states[job.slurm_id], seen.states[job.slurm_id]
        assert seen.states[job.slurm_id][-1] == "COMPLETED", seen.states[job.slurm_id]
        # ...with the rule's requests: one CPU, the run's memory, the task's time limit.
        assert seen.requests[job.slurm_id] == Request(
            time_limit_minutes=smoke_time_limit(env_id),
            cpus=1,
            memory_mb=train_memory_mb(env_id=env_id, buffer_size=SMOKE["train"]["buffer_size"]),
        ), env_id
        # slurmstepd wrote the job's output, the training rule's run, to its log.
        log = slurm_log_text(job)
        assert "rule train:" in log and "Finished jobid" in log, log
        trained = run_dir(on_slurm, "results/smoke", env_id)
        finished_at = json.loads((trained / "complete.json").read_text())["global_step"]
        assert finished_at == SMOKE["train"]["total_timesteps"]
        # the trainer itself ran inside that Slurm job
        sessions = json.loads((trained / "metadata.json").read_text())["sessions"]
        assert [session["host"]["slurm_job_id"] for session in sessions] == [job.slurm_id]
    # Per-task limits reached Slurm: Humanoid's is the longest (ties allowed at this budget).
    limits = {
        wildcards: seen.requests[job.slurm_id].time_limit_minutes
        for wildcards, job in train_jobs.items()
    }
    filmed = f"{VARIANT}_InvertedPendulum-v4_1"  # the smoke preset's video
    unfilmed = {wildcards: limit for wildcards, limit in limits.items() if wildcards != filmed}
    assert unfilmed[f"{VARIANT}_Humanoid-v4_1"] == max(unfilmed.values()), limits
    assert len(set(limits.values())) > 1, limits  # each task its own, not one for all
    assert limits[filmed] > limits[f"{VARIANT}_Hopper-v4_1"], limits  # filming takes time
    # Extraction, tables and plots ran on the submit host, in this Snakemake process.
    for env_id in SMOKE_ENV_IDS:
        assert (on_slurm / "results/smoke/extracted" / VARIANT / env_id / "1.csv").is_file()
    for rule in (
        "extract", "runtimes_table", "returns_table", "aggregate_table", "plots", "video",
    ):  # fmt: skip
        assert f"localrule {rule}:" in output, rule
    assert output.count("localrule extract:") == len(SMOKE_ENV_IDS), output
    assert [path.name for path in (on_slurm / "logs" / "slurm").iterdir()] == ["rule_train"]


def test_smoke_tables_match_a_local_run_in_structure(smoke_runs: SmokeRuns):
    on_slurm, local = smoke_runs.on_slurm, smoke_runs.local
    for target in SMOKE_TARGETS:
        assert (on_slurm / "results" / "smoke" / target).stat().st_size > 0, target
    for table in SMOKE_TABLES:
        from_slurm = pd.read_csv(on_slurm / "results" / "smoke" / table)
        from_local = pd.read_csv(local / "results" / "smoke" / table)
        assert list(from_slurm.columns) == list(from_local.columns), table
        assert from_slurm.dtypes.to_dict() == from_local.dtypes.to_dict(), table
        assert from_slurm.shape == from_local.shape, table
        # the same rows (tasks, variants) in the same order
        assert from_slurm.iloc[:, 0].tolist() == from_local.iloc[:, 0].tolist(), table
    for table in ("sac.md", "sac_runtimes.md", "sac_aggregate.md"):
        slurm_lines = (on_slurm / "results" / "smoke" / table).read_text().splitlines()
        local_lines = (local / "results" / "smoke" / table).read_text().splitlines()
        assert len(slurm_lines) == len(local_lines), table
        assert [line.split("|")[1] for line in slurm_lines if line.startswith("|")] == [
            line.split("|")[1] for line in local_lines if line.startswith("|")
        ], table


def test_smoke_training_on_slurm_equals_local_training(smoke_runs: SmokeRuns):
    """Same seed, same single thread: where a run trains must not change what it computes."""
    on_slurm, local = smoke_runs.on_slurm, smoke_runs.local
    for env_id in SMOKE_ENV_IDS:
        pd.testing.assert_frame_equal(
            comparable_scalars(run_dir(on_slurm, "results/smoke", env_id)),
            comparable_scalars(run_dir(local, "results/smoke", env_id)),
        )


# ---- what train jobs ask Slurm for -------------------------------------------------------------


def dry_run_train_jobs(output: str) -> dict[tuple[str, str], dict[str, str]]:
    """(env_id, seed) -> the train job's resources, from `snakemake -n` output."""
    jobs = {}
    for block in re.findall(r"^rule train:\n((?:    .*\n?)+)", output, re.MULTILINE):
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.MULTILINE))
        wildcards = dict(item.split("=", 1) for item in fields["wildcards"].split(", "))
        resources = dict(item.split("=", 1) for item in fields["resources"].split(", "))
        jobs[(wildcards["env_id"], wildcards["seed"])] = resources
    return jobs


def test_time_limits_are_per_task_and_one_variable_replaces_them(tmp_path: Path):
    """The default benchmark's train jobs get their task's limit; SACBENCH_SLURM_TRAIN_RUNTIME
    (docs/slurm.md) gives every one the same limit and keeps the warning signal before it."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    workdir = workflow_copy(tmp_path / "sacbench", config)

    planned = run_verbatim(workdir, f"{SLURM_COMMAND} -n", timeout=120)
    assert planned.returncode == 0, planned.stderr
    jobs = dry_run_train_jobs(planned.stdout + planned.stderr)
    assert len(jobs) == 18
    for (env_id, _), resources in jobs.items():
        expected = train_runtime_minutes(env_id=env_id, total_timesteps=1_000_000)
        assert resources["runtime"] == str(expected), env_id
        assert resources["slurm_extra"] == "--signal=TERM@300 --open-mode=append"
    assert len({resources["runtime"] for resources in jobs.values()}) == 2  # Humanoid's, others'

    fixed = run_verbatim(
        workdir, f"{SLURM_COMMAND} -n", SACBENCH_SLURM_TRAIN_RUNTIME="12h", timeout=120
    )
    assert fixed.returncode == 0, fixed.stderr
    jobs = dry_run_train_jobs(fixed.stdout + fixed.stderr)
    assert len(jobs) == 18
    for resources in jobs.values():
        assert resources["runtime"] == "720"
        assert resources["slurm_extra"] == "--signal=TERM@300 --open-mode=append"


def rendered_slurm_profile(**env: str) -> dict:
    """profiles/slurm as Snakemake reads it (through yte) with these environment variables set,
    in a child process: the profile's definitions write to the environment they run in."""
    read = (
        "import json, sys, yte; "
        "print(json.dumps(yte.process_yaml(open(sys.argv[1]), require_use_yte=True)))"
    )
    profile = REPO / "profiles" / "slurm" / "profile.yaml"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SACBENCH_")} | env
    done = subprocess.run(
        [sys.executable, "-c", read, str(profile)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_status_seconds_set_the_executors_status_interval_and_bad_numbers_are_named(
    tmp_path: Path,
):
    """SACBENCH_SLURM_STATUS_SECONDS becomes the executor's first status check interval (unset:
    the executor's own default); a whole-number setting that is not one stops Snakemake before any
    job, naming the variable."""
    interval = "slurm-init-seconds-before-status-checks"
    assert interval not in rendered_slurm_profile()
    assert rendered_slurm_profile(SACBENCH_SLURM_STATUS_SECONDS="7")[interval] == 7

    workdir = workflow_copy(tmp_path / "sacbench", SMOKE)
    for name, value in [
        ("SACBENCH_SLURM_STATUS_SECONDS", "0"),
        ("SACBENCH_SLURM_STATUS_SECONDS", "ten"),
        ("SACBENCH_SLURM_TRAIN_CPUS", "1.5"),
    ]:
        refused = run_verbatim(workdir, f"{SLURM_COMMAND} -n", timeout=120, **{name: value})
        assert refused.returncode != 0, (name, value)
        output = refused.stdout + refused.stderr
        assert f"{name} must be a whole number of at least 1, got {value!r}" in output, output
        assert "rule train:" not in output, output
    assert not (workdir / "results").exists()


def test_submit_host_does_not_cap_what_train_jobs_ask_slurm_for(slurm_cluster, tmp_path: Path):
    """profiles/default, the workflow profile for local runs (every core of this machine, a memory
    total), is applied on top of profiles/slurm as well. A train job must still ask Slurm for more
    CPUs and memory than the submit host has, unchanged. The job goes to a partition that does not
    exist, so that Slurm refuses it at once and shows the whole request whatever it holds."""
    host_mb = psutil.virtual_memory().total // 2**20
    cpus = max(8, 4 * (os.cpu_count() or 1))
    per_transition = replay_buffer_bytes(env_id="Humanoid-v4", buffer_size=1)
    buffer_size = math.ceil(2 * host_mb * 2**20 / per_transition)
    memory_mb = train_memory_mb(env_id="Humanoid-v4", buffer_size=buffer_size)
    assert memory_mb > host_mb
    config = {
        "env_ids": ["Humanoid-v4"],
        "seeds": [1],
        "train": {**TINY_TRAIN, "buffer_size": buffer_size},
    }
    workdir = workflow_copy(tmp_path / "sacbench", config)

    done = run_snakemake(
        workdir,
        "--retries",
        "0",
        SACBENCH_SLURM_TRAIN_CPUS=str(cpus),
        SACBENCH_SLURM_PARTITION="no-such-partition",
        timeout=180,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "invalid partition specified: no-such-partition" in output, output
    (call,) = re.findall(r"^\s*(sbatch --parsable .*)$", output, re.MULTILINE)
    inner_cores = re.search(r" --cores '?(\w+)'? ", call)[1]
    asked = {
        "cpus": int(re.search(r" --cpus-per-task=(\d+) ", call)[1]),
        "mem_mb": int(re.search(r" --mem (\d+) ", call)[1]),
        "minutes": int(re.search(r" -t '?(\d+)'? ", call)[1]),
        # the Snakemake inside the job must not cap the trainer's threads at this host's cores
        "threads capped inside the job": inner_cores != "all" and int(inner_cores) < cpus,
    }
    assert asked == {
        "cpus": cpus,
        "mem_mb": memory_mb,
        "minutes": train_runtime_minutes(env_id="Humanoid-v4", total_timesteps=400),
        "threads capped inside the job": False,
    }, call
    assert submissions(output) == []


# ---- preemption --------------------------------------------------------------------------------

PREEMPT_ENV = "InvertedPendulum-v4"
PREEMPT_CONFIG = {
    "env_ids": [PREEMPT_ENV],
    "seeds": [1],
    "results_dir": "results",
    "train": {
        "total_timesteps": 2000,
        "learning_starts": 500,
        "batch_size": 64,
        "buffer_size": 2000,
        "checkpoint_interval": 1000,
    },
}


def test_requeued_train_job_resumes_without_losing_or_repeating_a_step(
    slurm_cluster, tmp_path: Path
):
    on_slurm = workdir_with_config(tmp_path / "slurm", PREEMPT_CONFIG)
    reference = workdir_with_config(tmp_path / "reference", PREEMPT_CONFIG)
    target = f"results/runs/{VARIANT}/{PREEMPT_ENV}/1/complete.json"
    slurm_run_dir = run_dir(on_slurm, "results", PREEMPT_ENV)

    # The uninterrupted reference trains locally, next to the Slurm run.
    reference_run = subprocess.Popen(
        snakemake_command(
            target, "--cores", "1", *configfiles(reference, "test-0.yaml"), profile=None
        ),
        cwd=reference,
        env=snakemake_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    slurm_output = tmp_path / "slurm-snakemake.log"
    started = time.monotonic()
    with watch_squeue() as seen, slurm_output.open("w") as output_file:
        slurm_run = subprocess.Popen(
            snakemake_command(target, *configfiles(on_slurm, "test-0.yaml")),
            cwd=on_slurm,
            env=snakemake_env(),
            stdout=output_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            (job,) = wait_for(
                lambda: submissions(slurm_output.read_text()),
                timeout=120,
                what="the train job's submission",
            )
            # Preempt once the run has checkpointed, 500 steps into the update phase, so that
            # the resumed run restores networks, optimisers and a partly saved replay buffer.
            wait_for(
                lambda: (slurm_run_dir / "checkpoint" / "state.pt").exists(),
                timeout=240,
                what="the first checkpoint",
            )
            assert "RUNNING" in seen.states.get(job.slurm_id, []), seen.states
            requeue = subprocess.run(
                ["scontrol", "requeue", job.slurm_id], capture_output=True, text=True
            )
            assert requeue.returncode == 0, requeue.stderr
            slurm_run.wait(timeout=400)
        finally:
            if slurm_run.poll() is None:
                slurm_run.kill()
    elapsed = time.monotonic() - started
    reference_output, _ = reference_run.communicate(timeout=300)
    output = slurm_output.read_text()
    print(f"\npreemption test: Slurm run {elapsed:.0f} s wall time; squeue saw {seen.states}")
    assert slurm_run.returncode == 0, output
    assert reference_run.returncode == 0, reference_output

    # Slurm requeued the job (same job id, run twice), it was not resubmitted by Snakemake.
    assert [submission.slurm_id for submission in submissions(output)] == [job.slurm_id]
    states = seen.states[job.slurm_id]
    assert states[-1] == "COMPLETED", states
    assert states.count("RUNNING") == 2, states
    shown = subprocess.run(
        ["scontrol", "show", "job", job.slurm_id], capture_output=True, text=True
    )
    assert "Restarts=1" in shown.stdout, shown.stdout
    # Both runs of the job wrote to the same Slurm log (the profile's --open-mode=append); each
    # ran the rule in its job step.
    log = slurm_log_text(job)
    assert log.count("\nlocalrule train:") == 2, log
    assert f"JOB {job.slurm_id} ON" in log and "DUE TO JOB REQUEUE" in log, log

    # The trainer received Slurm's SIGTERM, checkpointed where it was, and resumed from there.
    sessions = json.loads((slurm_run_dir / "metadata.json").read_text())["sessions"]
    assert [session["exit_status"] for session in sessions] == ["signal SIGTERM", "completed"]
    interrupted_at = sessions[0]["end_step"]
    assert 0 < interrupted_at < PREEMPT_CONFIG["train"]["total_timesteps"], sessions
    assert sessions[1]["start_step"] == interrupted_at, sessions
    assert [session["host"]["slurm_job_id"] for session in sessions] == [job.slurm_id] * 2
    assert len(list(slurm_run_dir.glob("events.out.tfevents.*"))) == 2

    # No step lost or duplicated: the event log equals the uninterrupted run's.
    resumed = comparable_scalars(slurm_run_dir)
    # (The final evaluation's episodes share their step.)
    assert not resumed[~resumed["tag"].isin(EVAL_EPISODE_TAGS)].duplicated(["tag", "step"]).any()
    pd.testing.assert_frame_equal(
        resumed, comparable_scalars(run_dir(reference, "results", PREEMPT_ENV))
    )
    assert json.loads((slurm_run_dir / "complete.json").read_text())["global_step"] == 2000


# ---- failures ----------------------------------------------------------------------------------

TINY_TRAIN = {
    "total_timesteps": 400,
    "learning_starts": 100,  # log points at 200 and 300: a budget the runtimes table accepts
    "batch_size": 32,
    "buffer_size": 400,
    "checkpoint_interval": 200,
}


def test_failing_train_job_is_reported_with_its_slurm_log_and_others_complete(
    slurm_cluster, tmp_path: Path
):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the broken variant asks for CUDA, which this machine has")
    config = {
        "env_ids": ["InvertedPendulum-v4"],
        "seeds": [1],
        "train": TINY_TRAIN,
        # Valid for the schema, impossible at run time on a machine without CUDA: the trainer
        # fails for good, on every retry.
        "variants": {"healthy": {}, "broken": {"device": "cuda"}},
    }
    workdir = workdir_with_config(tmp_path, config)
    targets = [
        f"results/runs/{variant}/InvertedPendulum-v4/1/complete.json"
        for variant in config["variants"]
    ]
    done = run_snakemake(
        workdir, *targets, "--keep-going", "--retries", "1", *configfiles(workdir, "test-0.yaml")
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output

    broken = [job for job in submissions(output) if job.wildcards.startswith("broken_")]
    # submitted, failed, resubmitted by the profile's retries, failed again: reported with the
    # Slurm log of each attempt
    assert len(broken) == 2, output
    for job in broken:
        assert f"SLURM-job '{job.slurm_id}' failed" in output, output
        # the Slurm log is named in the report and holds the job's side of the story
        assert str(job.log) in output, output
        assert "Error in rule train" in slurm_log_text(job), slurm_log_text(job)
    # the trainer's own error, from the rule's log (show-failed-logs)
    assert "--device cuda was asked for" in output, output

    healthy = run_dir(workdir, "results", "InvertedPendulum-v4", variant="healthy")
    assert json.loads((healthy / "complete.json").read_text())["global_step"] == 400
    assert not (workdir / targets[1]).exists()


def test_unknown_partition_fails_at_submit_time_with_slurms_message(slurm_cluster, tmp_path: Path):
    config = {"env_ids": ["InvertedPendulum-v4"], "seeds": [1], "train": TINY_TRAIN}
    workdir = workdir_with_config(tmp_path, config)
    target = f"results/runs/{VARIANT}/InvertedPendulum-v4/1/complete.json"
    done = run_snakemake(
        workdir,
        target,
        "--retries",
        "0",
        *configfiles(workdir, "test-0.yaml"),
        SACBENCH_SLURM_PARTITION="no-such-partition",
        timeout=180,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "SLURM sbatch failed" in output, output
    # Slurm's own words, naming the partition
    assert "invalid partition specified: no-such-partition" in output, output
    assert submissions(output) == []
    assert not (workdir / target).exists()
    assert not (workdir / target).parent.exists()


def test_stop_ends_what_ended_jobs_left_running(slurm_cluster, tmp_path: Path):
    """The test cluster tracks a job's processes by parentage (proctrack/linuxproc), so a process
    whose parent exited outlives its job, as a job-step Snakemake stuck in its SIGTERM handler
    after a requeue once did. `stop` finds it by the cluster's name in its environment, ends it
    and names it; `start` then brings the cluster back."""
    pid_file = tmp_path / "left-behind.pid"
    script = f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--output", str(tmp_path / "job.log"), "--wrap", script],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]

    def job_ended() -> bool:
        listed = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-t", "PD,R,CG", "-o", "%i"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return pid_file.is_file() and not listed.stdout.strip()

    wait_for(job_ended, timeout=60, what=f"job {job_id} to end")
    pid = int(pid_file.read_text())
    try:
        assert process_runs(pid), "the job's process ended with its job: nothing was left behind"
        stopped = cluster("stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert re.search(rf"^slurm-cluster: +{pid} sleep 600$", stopped.stderr, re.MULTILINE), (
            stopped.stderr
        )
        assert not process_runs(pid)
    finally:
        if process_runs(pid):
            os.kill(pid, signal.SIGKILL)
        started = cluster("start")
        assert started.returncode == 0, started.stdout + started.stderr

"""sacbench through a real Slurm cluster: the single-node cluster of scripts/slurm-cluster.sh,
Snakemake's Slurm executor with profiles/slurm, the real trainer.

Every Slurm job pays two nested Snakemake start-ups, so the budgets are small: the smoke
preset (six tasks, 2,000 steps each), one short run for preemption, a few hundred steps for
failures. The cluster is started once per session and stopped at the end (unless it was
already running). Without the Slurm binaries the tests are skipped, except in CI (CI=true),
where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sacbench.events import read_run_scalars
from sacbench.tags import TIME_TAGS
from tests.slurm_cluster import (
    REPO,
    Submission,
    cluster,
    missing_binaries,
    run_snakemake,
    snakemake_command,
    snakemake_env,
    submissions,
    wait_for,
    watch_squeue,
    write_yaml,
)

pytestmark = pytest.mark.slurm

VARIANT = "sac_continuous_action"
# The whole smoke preset (all six tasks, one seed): 6 train + 6 extract + table and plot jobs.
SMOKE_ENV_IDS = yaml.safe_load((REPO / "config.yaml").read_text())["env_ids"]
SMOKE_TABLES = ("sac.csv", "sac_runtimes.csv", "sac_aggregate.csv")
SMOKE_TARGETS = [
    *SMOKE_TABLES,
    "sac.md",
    "sac_runtimes.md",
    "sac_aggregate.md",
    *[f"plots/{name}.{ext}" for name in ("sac", "sac-time", "sac-sps") for ext in ("png", "svg")],
]


@pytest.fixture(scope="session")
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
    untimed = scalars[~scalars["tag"].isin(list(TIME_TAGS))]
    return untimed[["tag", "step", "value"]].reset_index(drop=True)


def slurm_log_text(submission: Submission) -> str:
    return submission.log.read_text(errors="replace")


# ---- the smoke workflow ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_runs(slurm_cluster, tmp_path_factory: pytest.TempPathFactory):
    """The smoke preset once through Slurm and once locally, side by side."""
    on_slurm = workdir_with_config(tmp_path_factory.mktemp("slurm-smoke"))
    local = workdir_with_config(tmp_path_factory.mktemp("local-smoke"))
    config_args = ["smoke.yaml"]

    local_run = subprocess.Popen(
        snakemake_command("--cores", "1", *configfiles(local, *config_args), profile=None),
        cwd=local,
        env=snakemake_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.monotonic()
    with watch_squeue() as seen:
        slurm_run = run_snakemake(on_slurm, *configfiles(on_slurm, *config_args))
    elapsed = time.monotonic() - started
    local_output, _ = local_run.communicate(timeout=600)
    print(f"\nSlurm smoke run ({len(SMOKE_ENV_IDS)} tasks): {elapsed:.0f} s wall time")
    assert slurm_run.returncode == 0, slurm_run.stdout + slurm_run.stderr
    assert local_run.returncode == 0, local_output
    return on_slurm, local, slurm_run.stdout + slurm_run.stderr, seen


def test_smoke_workflow_runs_every_train_job_as_a_slurm_job(smoke_runs):
    on_slurm, _, output, seen = smoke_runs
    jobs = submissions(output)
    train_jobs = {job.wildcards: job for job in jobs if job.rule == "train"}
    assert sorted(train_jobs) == sorted(f"{VARIANT}_{env_id}_1" for env_id in SMOKE_ENV_IDS)
    for wildcards, job in train_jobs.items():
        # squeue saw the job run and finish under the comment the executor gave it...
        assert seen.comments[job.slurm_id] == f"rule_train_wildcards_{wildcards}"
        assert "RUNNING" in seen.states[job.slurm_id], seen.states[job.slurm_id]
        assert seen.states[job.slurm_id][-1] == "COMPLETED", seen.states[job.slurm_id]
        # ...and slurmstepd wrote the job's output, the training rule's run, to its log.
        log = slurm_log_text(job)
        assert "rule train:" in log and "Finished jobid" in log, log
        env_id = wildcards.removeprefix(f"{VARIANT}_").removesuffix("_1")
        trained = run_dir(on_slurm, "results/smoke", env_id)
        assert json.loads((trained / "complete.json").read_text())["global_step"] == 2000
        # the trainer itself ran inside that Slurm job
        sessions = json.loads((trained / "metadata.json").read_text())["sessions"]
        assert [session["host"]["slurm_job_id"] for session in sessions] == [job.slurm_id]
    print("Slurm job ids:", {job.slurm_id: (job.rule, job.wildcards) for job in jobs})
    # Every job of the workflow ran on Slurm, not only the training.
    assert {job.rule for job in jobs} >= {"train", "extract"}
    assert all(seen.states[job.slurm_id][-1] == "COMPLETED" for job in jobs)


def test_smoke_tables_match_a_local_run_in_structure(smoke_runs):
    on_slurm, local, _, _ = smoke_runs
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


def test_smoke_training_on_slurm_equals_local_training(smoke_runs):
    """Same seed, same single thread: where a run trains must not change what it computes."""
    on_slurm, local, _, _ = smoke_runs
    for env_id in SMOKE_ENV_IDS:
        pd.testing.assert_frame_equal(
            comparable_scalars(run_dir(on_slurm, "results/smoke", env_id)),
            comparable_scalars(run_dir(local, "results/smoke", env_id)),
        )


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
    assert not resumed.duplicated(["tag", "step"]).any()
    pd.testing.assert_frame_equal(
        resumed, comparable_scalars(run_dir(reference, "results", PREEMPT_ENV))
    )
    assert json.loads((slurm_run_dir / "complete.json").read_text())["global_step"] == 2000


# ---- failures ----------------------------------------------------------------------------------

TINY_TRAIN = {
    "total_timesteps": 400,
    "learning_starts": 200,
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

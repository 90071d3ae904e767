"""The pipeline for real: Snakemake runs the real trainer and report on a tiny config in a temp dir.

Two variants x two envs x two seeds, 500 steps with learning_starts 100: every run reaches the
training update and logs several steady-SPS points; Pusher's 100-step episodes guarantee finished
episodes for the return table.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]

TINY_CONFIG = {
    "env_ids": ["Hopper-v4", "Pusher-v4"],
    "seeds": [1, 2],
    "train": {
        "total_timesteps": 500,
        "learning_starts": 100,
        "batch_size": 32,
        "buffer_size": 300,
        "checkpoint_interval": 100,
    },
    "variants": {"base": {}, "slow_actor": {"policy_lr": 0.0001}},
}
RUNS = [
    (variant, env_id, seed)
    for variant in TINY_CONFIG["variants"]
    for env_id in TINY_CONFIG["env_ids"]
    for seed in TINY_CONFIG["seeds"]
]
FINAL_TARGETS = [
    "results/sac_runtimes.md",
    "results/sac_runtimes.csv",
    "results/sac.md",
    "results/sac.csv",
    "results/sac_aggregate.md",
    "results/sac_aggregate.csv",
    *[
        f"results/plots/{name}.{ext}"
        for name in ("sac", "sac-time", "sac-sps")
        for ext in ("png", "svg")
    ],
]


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True, timeout=900
    )


def planned_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, first output) of every job a `snakemake -n` run lists."""
    jobs: list[tuple[str, str]] = []
    for line in dry_run_output.splitlines():
        header = re.match(r"^(?:local)?rule (\w+):$", line)
        if header:
            jobs.append((header.group(1), ""))
            continue
        output = re.match(r"^\s+output: ([^,\s]+)", line)
        if output and jobs and not jobs[-1][1]:
            jobs[-1] = (jobs[-1][0], output.group(1))
    return jobs


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(root)): (path.stat().st_mtime_ns, path.stat().st_size)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (
        not (REPO / "sacbench" / "report.py").exists()
        and not (REPO / "sacbench" / "report").is_dir()
    ):
        pytest.skip("sacbench.report is not in this checkout yet")
    workdir = tmp_path_factory.mktemp("pipeline")
    write_config(workdir, TINY_CONFIG)
    done = snakemake(workdir, "--cores", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    return workdir


@pytest.mark.slow
def test_tiny_run_produces_every_final_target(finished: Path):
    for target in FINAL_TARGETS:
        assert (finished / target).stat().st_size > 0, target
    for variant, env_id, seed in RUNS:
        run_dir = finished / "results" / "runs" / variant / env_id / str(seed)
        assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 500
        args = json.loads((run_dir / "metadata.json").read_text())["args"]
        assert (args["env_id"], args["seed"], args["batch_size"]) == (env_id, seed, 32)
        expected_lr = TINY_CONFIG["variants"][variant].get("policy_lr", 0.0003)
        assert args["policy_lr"] == expected_lr
        assert list(run_dir.glob("events.out.tfevents.*"))
        extracted = finished / "results" / "extracted" / variant / env_id / f"{seed}.csv"
        assert extracted.stat().st_size > 0
        # the update ran: its losses were logged
        assert "losses/qf_loss" in extracted.read_text()
        log = finished / "results" / "logs" / "train" / variant / env_id / f"{seed}.log"
        assert log.exists()
    for table in ("sac.md", "sac_runtimes.md"):
        text = (finished / "results" / table).read_text()
        for name in [*TINY_CONFIG["variants"], *TINY_CONFIG["env_ids"]]:
            assert name in text, f"{name} missing from {table}"


@pytest.mark.slow
def test_second_invocation_schedules_nothing(finished: Path):
    done = snakemake(finished, "-n")
    assert done.returncode == 0, done.stderr
    assert "Nothing to be done" in done.stdout + done.stderr
    assert planned_jobs(done.stdout) == []
    # Runtime settings are not what a run computes: more threads retrain nothing.
    done = snakemake(finished, "-n", "--set-threads", "train=2")
    assert "Nothing to be done" in done.stdout + done.stderr


@pytest.mark.slow
def test_html_report_holds_every_table_and_plot(finished: Path):
    done = snakemake(finished, "--report", "results/report.html")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (finished / "results" / "report.html").stat().st_size > 0


@pytest.mark.slow
def test_changing_one_setting_reruns_exactly_the_affected_runs(finished: Path, tmp_path: Path):
    workdir = tmp_path / "copy"
    shutil.copytree(finished, workdir, symlinks=True)
    config = json.loads(json.dumps(TINY_CONFIG))
    config["variants"]["slow_actor"]["batch_size"] = 16
    write_config(workdir, config)

    jobs = planned_jobs(snakemake(workdir, "-n").stdout)
    counts = Counter(rule for rule, _ in jobs)
    retrained = sorted(output for rule, output in jobs if rule == "train")
    assert retrained == sorted(
        f"results/runs/slow_actor/{env_id}/{seed}/complete.json"
        for env_id in TINY_CONFIG["env_ids"]
        for seed in TINY_CONFIG["seeds"]
    )
    assert counts["extract"] == 4
    assert counts["runtimes_table"] == counts["returns_table"] == counts["plots"] == 1

    untouched = tree_state(workdir / "results" / "runs" / "base")
    done = snakemake(workdir, "--cores", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert tree_state(workdir / "results" / "runs" / "base") == untouched
    for env_id in TINY_CONFIG["env_ids"]:
        for seed in TINY_CONFIG["seeds"]:
            parent = workdir / "results" / "runs" / "slow_actor" / env_id
            metadata = json.loads((parent / str(seed) / "metadata.json").read_text())
            assert metadata["args"]["batch_size"] == 16
            # the old run was moved aside, not deleted
            assert list(parent.glob(f"{seed}.replaced-*"))
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


BAD_CONFIGS = {
    "unknown env id": ({"env_ids": ["Hopper-v4", "Hoper-v5"]}, ["env_ids[1]", "'Hoper-v5'"]),
    "discrete action space": (
        {"env_ids": ["Hopper-v5", "CartPole-v1"]},
        ["env_ids[1]", "CartPole-v1", "Discrete action space"],
    ),
    "empty seeds": ({"seeds": []}, ["seeds", "[]"]),
    "duplicate seeds": ({"seeds": [1, 1]}, ["seeds", "duplicate"]),
    "non-integer seed": ({"seeds": [1, 2.5]}, ["seeds[1]", "2.5"]),
    "non-positive steps": (
        {"train": {**TINY_CONFIG["train"], "total_timesteps": 0}},
        ["train.total_timesteps", "0"],
    ),
    "non-integer batch size": (
        {"train": {**TINY_CONFIG["train"], "batch_size": 3.5}},
        ["train.batch_size", "3.5"],
    ),
    "gamma outside [0, 1]": (
        {"variants": {"base": {"gamma": 1.01}}},
        ["variants.base.gamma", "1.01"],
    ),
    "tau outside [0, 1]": ({"variants": {"base": {"tau": -0.5}}}, ["variants.base.tau", "-0.5"]),
    "unknown top-level key": ({"seed": [1]}, ["seed", "unknown key"]),
    "override not a trainer argument": (
        {"variants": {"base": {"lr": 0.1}}},
        ["variants.base.lr", "not a trainer argument"],
    ),
    "variant name not a directory name": (
        {"variants": {"../escape": {}}},
        ["variants", "'../escape'"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_bad_config_is_rejected_before_anything_runs(name: str, tmp_path: Path):
    bad, fragments = BAD_CONFIGS[name]
    write_config(tmp_path, {**TINY_CONFIG, **bad})
    sentinel = tmp_path / "results" / "runs" / "base" / "Hopper-v4" / "1" / "complete.json"
    sentinel.parent.mkdir(parents=True)
    sentinel.write_text('{"global_step": 500}')
    before = tree_state(tmp_path / "results")

    done = snakemake(tmp_path, "--cores", "1")

    assert done.returncode != 0
    message = done.stdout + done.stderr
    assert "invalid sacbench config" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from:\n{message}"
    assert tree_state(tmp_path / "results") == before


@pytest.mark.slow
def test_a_train_job_that_dies_is_rerun_and_resumes_from_its_checkpoint(tmp_path: Path):
    psutil = pytest.importorskip("psutil")
    config = {
        **TINY_CONFIG,
        "env_ids": ["Pusher-v4"],
        "seeds": [1],
        "variants": {"base": {}},
        "train": {**TINY_CONFIG["train"], "total_timesteps": 4000, "checkpoint_interval": 200},
    }
    write_config(tmp_path, config)
    run_dir = tmp_path / "results" / "runs" / "base" / "Pusher-v4" / "1"
    first = subprocess.Popen(
        [*SNAKEMAKE, "--cores", "1", "results/runs/base/Pusher-v4/1/complete.json"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoint" / "state.pt").exists():
            assert first.poll() is None, "the first invocation ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        trainers = [
            process
            for process in psutil.Process(first.pid).children(recursive=True)
            if process.cmdline()[1:3] == ["-m", "sacbench.train"]
        ]
        assert len(trainers) == 1
        trainers[0].kill()  # SIGKILL: no chance to write a last checkpoint
        assert first.wait(timeout=120) != 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert not (run_dir / "complete.json").exists()

    # The rerun builds the runtimes table: extraction checks that every (tag, step) of the
    # resumed run's event files appears once, and the table that every steady_SPS is positive.
    done = snakemake(tmp_path, "--cores", "1", "results/sac_runtimes.md")

    assert done.returncode == 0, done.stdout + done.stderr
    sessions = json.loads((run_dir / "metadata.json").read_text())["sessions"]
    assert len(sessions) == 2
    assert sessions[1]["start_step"] > 0
    assert sessions[1]["end_step"] == 4000
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 4000
    assert "Pusher-v4" in (tmp_path / "results" / "sac_runtimes.md").read_text()

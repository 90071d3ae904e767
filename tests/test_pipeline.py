"""The pipeline for real: Snakemake runs the real trainer and report on a tiny config in a temp dir.

Two variants x two envs x two seeds, 500 steps with learning_starts 100: every run reaches the
training update and logs several steady-SPS points; Pusher's 100-step episodes guarantee finished
episodes for the return table. Every run ends with a final evaluation of 2 episodes, and
slow_actor's also evaluate after 250 steps. Videos are added afterwards, to a finished run, as a
user would add a task to video_env_ids (filming costs ~70 ms a frame, so only one test films).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from headless_browser import chromium_or_skip, shown_tables

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
        "eval_episodes": 2,
    },
    "variants": {"base": {}, "slow_actor": {"policy_lr": 0.0001, "eval_frequency": 250}},
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
    "results/sac_runtimes.html",
    "results/sac.html",
    "results/sac_aggregate.html",
    *[
        f"results/plots/{name}.{ext}"
        for name in ("sac", "sac-time", "sac-sps", "sac-eval", "sac-aggregate", "sac-profile")
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


def _extracted(workdir: Path, variant: str, env_id: str, seed: int) -> pd.DataFrame:
    return pd.read_csv(workdir / "results" / "extracted" / variant / env_id / f"{seed}.csv")


@pytest.mark.slow
def test_every_run_evaluates_and_the_returns_table_shows_the_final_evaluation(finished: Path):
    csv = pd.read_csv(finished / "results" / "sac.csv")
    for variant, env_id, seed in RUNS:
        scalars = _extracted(finished, variant, env_id, seed)
        steps = [250, 500] if variant == "slow_actor" else [500]
        evaluations = scalars[scalars.tag == "eval/episodic_return"]
        assert evaluations.step.tolist() == [step for step in steps for _ in range(2)]
        summary = json.loads((finished / "results" / "extracted" / variant / env_id /
                              f"{seed}.json").read_text())  # fmt: skip
        assert [e["step"] for e in summary["extraction"]["evaluations"]] == steps
        assert not (
            finished / "results" / "runs" / variant / env_id / str(seed) / "videos"
        ).exists()
    for variant in TINY_CONFIG["variants"]:
        for env_id in TINY_CONFIG["env_ids"]:
            finals = [
                _extracted(finished, variant, env_id, seed)
                .query("tag == 'eval/episodic_return' and step == 500")["value"]
                .mean()
                for seed in TINY_CONFIG["seeds"]
            ]
            row = csv[(csv.variant == variant) & (csv.env_id == env_id)].iloc[0]
            assert row.eval_n_seeds == 2 and row.eval_episodes_min == 2
            assert row.eval_return_mean == pytest.approx(np.mean(finals))
    table = (finished / "results" / "sac.md").read_text()
    assert "## Final evaluation return [G]" in table and "| – " not in table


@pytest.mark.slow
def test_second_invocation_schedules_nothing(finished: Path):
    done = snakemake(finished, "-n")
    assert done.returncode == 0, done.stderr
    assert "Nothing to be done" in done.stdout + done.stderr
    assert planned_jobs(done.stdout) == []
    # Runtime settings are not what a run computes: more threads retrain nothing.
    done = snakemake(finished, "-n", "--set-threads", "train=2")
    assert "Nothing to be done" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def html_report(finished: Path) -> Path:
    """`snakemake --report` of the finished tiny pipeline."""
    done = snakemake(finished, "--report", "results/report.html")
    assert done.returncode == 0, done.stdout + done.stderr
    return finished / "results" / "report.html"


@pytest.mark.slow
def test_html_report_holds_every_table_and_plot(html_report: Path):
    report = html_report.read_text(errors="replace")
    for name in ("sac.md", "sac_runtimes.md", "sac.png", "sac-eval.png", "sac-aggregate.png",
                 "sac-profile.png", "sac.csv", "sac_aggregate.csv", "sac.html"):  # fmt: skip
        assert name in report, name


def _markdown_cells(markdown: str) -> list[list[str]]:
    """Every row of every pipe table, as its text shows (no code or bold marks), rules left out."""
    return [
        [cell.strip().replace("`", "").replace("**", "") for cell in line.strip("|").split(" | ")]
        for line in markdown.splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ]


@pytest.mark.slow
def test_the_report_shows_every_table_inline(finished: Path, html_report: Path):
    """A reader opens each table from the report's "Tables" list in headless Chromium, and the
    viewer shows every cell of its markdown."""
    chromium = chromium_or_skip()
    tables = {"sac": "episodic returns", "sac_runtimes": "throughput and wall-clock",
              "sac_aggregate": "aggregate statistics"}  # fmt: skip
    rows = {stem: f"{stem} ({label})" for stem, label in tables.items()}
    shown = shown_tables(chromium, html_report, list(rows.values()))
    for stem, row in rows.items():
        expected = _markdown_cells((finished / "results" / f"{stem}.md").read_text())
        assert len(expected) > 10 and shown[row] == expected, stem


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


@pytest.mark.slow
def test_a_task_added_to_video_env_ids_is_filmed_and_shown_in_the_report(
    finished: Path, tmp_path: Path
):
    imageio = pytest.importorskip("imageio.v2")
    workdir = tmp_path / "copy"
    shutil.copytree(finished, workdir, symlinks=True)
    write_config(workdir, {**TINY_CONFIG, "video_env_ids": ["Pusher-v4"]})
    jobs = planned_jobs(snakemake(workdir, "-n").stdout)
    # Only the first seed's runs get --capture-video, so only their train jobs rerun.
    assert sorted(output for rule, output in jobs if rule == "train") == [
        f"results/runs/{variant}/Pusher-v4/1/complete.json" for variant in TINY_CONFIG["variants"]
    ]
    runs = workdir / "results" / "runs"
    before = tree_state(runs)
    done = snakemake(workdir, "--cores", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    # The finished runs are filmed from their final state: no step trained, no event written.
    after = tree_state(runs)
    assert {path for path in set(after) - set(before)} == {
        f"{variant}/Pusher-v4/1/videos/final.mp4" for variant in TINY_CONFIG["variants"]
    }
    assert all(after[path] == state for path, state in before.items() if "events" in path)
    for variant in TINY_CONFIG["variants"]:
        video = workdir / "results" / "videos" / variant / "Pusher-v4.mp4"
        assert video.read_bytes() == (runs / variant / "Pusher-v4" / "1" / "videos" /
                                      "final.mp4").read_bytes()  # fmt: skip
        with imageio.get_reader(video, format="FFMPEG") as reader:
            # the final evaluation's first episode: Pusher's last 100 steps
            assert reader.count_frames() >= 100 and reader.get_data(0).std() > 0
        page = video.with_suffix(".html").read_text()
        assert "<video" in page and "data:video/mp4;base64," in page

    done = snakemake(workdir, "--report", "results/report.html")
    assert done.returncode == 0, done.stdout + done.stderr
    report = (workdir / "results" / "report.html").read_text(errors="replace")
    assert "Videos" in report and "Pusher-v4.html" in report
    # The page that plays the video is embedded whole (as base64), and its video with it.
    page = (workdir / "results" / "videos" / "base" / "Pusher-v4.html").read_bytes()
    assert base64.b64encode(page)[:2000].decode() in report

    # A run without its video (as one finished by sacbench 0.1.0, which keeps no final actor):
    # the video job fails with an error naming the run dir.
    run_dir = runs / "base" / "Pusher-v4" / "1"
    (run_dir / "videos" / "final.mp4").unlink()
    target = "results/videos/base/Pusher-v4.mp4"
    done = snakemake(workdir, "--cores", "1", "--forcerun", target, target)
    assert done.returncode != 0
    log = (workdir / "results" / "logs" / "videos" / "base" / "Pusher-v4.log").read_text()
    assert f"{run_dir.relative_to(workdir)}: no videos/final.mp4" in log, log


# Each config fails every check it can at once (validated_config reports every problem, and
# tests/test_config.py checks each one alone): one Snakemake start per config, not per problem.
# The seeds are checked three ways, one per config. Each problem's fragments, the key and the bad
# value, must share a line of the message.
BAD_CONFIGS = {
    "every kind of problem": (
        {
            "env_ids": ["Hopper-v4", "Hoper-v5", "CartPole-v1"],
            "seeds": [],
            "train": {**TINY_CONFIG["train"], "total_timesteps": 0, "batch_size": 3.5},
            "variants": {"base": {"gamma": 1.01, "tau": -0.5, "lr": 0.1}, "../escape": {}},
            "seed": [1],
        },
        [
            ("env_ids[1]", "'Hoper-v5'"),  # unknown env id
            ("env_ids[2]", "CartPole-v1", "Discrete action space"),
            ("seeds:", "[]"),  # empty
            ("train.total_timesteps", "0"),  # not positive
            ("train.batch_size", "3.5"),  # not an integer
            ("variants.base.gamma", "1.01"),  # outside [0, 1]
            ("variants.base.tau", "-0.5"),
            ("seed:", "unknown key"),
            ("variants.base.lr", "not a trainer argument"),
            ("variants:", "'../escape'"),  # not a directory name
        ],
    ),
    "duplicate seeds": ({"seeds": [1, 1]}, [("seeds", "duplicate")]),
    "non-integer seed": ({"seeds": [1, 2.5]}, [("seeds[1]", "2.5")]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_bad_config_is_rejected_before_anything_runs(name: str, tmp_path: Path):
    bad, problems = BAD_CONFIGS[name]
    write_config(tmp_path, {**TINY_CONFIG, **bad})
    sentinel = tmp_path / "results" / "runs" / "base" / "Hopper-v4" / "1" / "complete.json"
    sentinel.parent.mkdir(parents=True)
    sentinel.write_text('{"global_step": 500}')
    before = tree_state(tmp_path / "results")

    done = snakemake(tmp_path, "--cores", "1")

    assert done.returncode != 0
    message = done.stdout + done.stderr
    assert "invalid sacbench config" in message
    for fragments in problems:
        assert any(all(f in line for f in fragments) for line in message.splitlines()), (
            f"no line holds {fragments!r}:\n{message}"
        )
    assert tree_state(tmp_path / "results") == before


@pytest.mark.slow
def test_a_train_job_that_dies_is_rerun_and_resumes_from_its_checkpoint(tmp_path: Path):
    psutil = pytest.importorskip("psutil")
    config = {
        **TINY_CONFIG,
        "env_ids": ["Pusher-v4"],
        "seeds": [1],
        "variants": {"base": {}},
        "train": {**TINY_CONFIG["train"], "total_timesteps": 2000, "checkpoint_interval": 200},
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
    assert sessions[1]["end_step"] == 2000
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 2000
    assert "Pusher-v4" in (tmp_path / "results" / "sac_runtimes.md").read_text()

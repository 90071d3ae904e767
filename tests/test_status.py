"""progress.json from real trainer runs, and `python -m sacbench.status` reading real run dirs."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sacbench.events import read_run_scalars
from sacbench.pipeline.config import load_schema, validated_config
from sacbench.pipeline.status import (
    HEADERS,
    SCHEMA_PATH,
    RunKey,
    classify,
    differing_args,
    expected_run,
    parse_args,
    read_run_status,
    snakemake_options,
)
from sacbench.training.checkpoint import load_state
from sacbench.training.progress import RETURN_WINDOW, RunProgress
from tests.trainer_runs import start_trainer, train_command, train_in_process, write_format_1_state
from tests.workflow_copies import interruptible

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ENV = "InvertedPendulum-v4"
TOTAL, LEARNING_STARTS, CHECKPOINT_INTERVAL = 1000, 700, 300
# ~110 random-action episodes of ~6 steps, so the last-100 window drops some; updates run.
TRAIN = {
    "total_timesteps": TOTAL,
    "learning_starts": LEARNING_STARTS,
    "batch_size": 32,
    "checkpoint_interval": CHECKPOINT_INTERVAL,
}
# As the pipeline trains variant "sac" of the status tests' project (its seed 1).
RUN = (
    "--env-id", ENV, "--device", "cpu", "--exp-name", "sac",
    *(arg for key, value in TRAIN.items() for arg in (f"--{key.replace('_', '-')}", str(value))),
)  # fmt: skip
# A run that outlives the test: random actions only, so it costs little while it lives (the
# project's variant "long"; its seed 1 unless a --seed follows).
LONG_TOTAL = 200_000
LONG_TRAIN = {"total_timesteps": LONG_TOTAL, "learning_starts": LONG_TOTAL - 1000}
LONG = ("--env-id", ENV, "--device", "cpu", "--exp-name", "long", "--batch-size", "32",
        "--total-timesteps", str(LONG_TOTAL),
        "--learning-starts", str(LONG_TRAIN["learning_starts"]))  # fmt: skip


def read_progress(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "progress.json").read_text())


def episodic_returns(run_dir: Path) -> list[float]:
    scalars = read_run_scalars(run_dir)
    return scalars[scalars["tag"] == "charts/episodic_return"]["value"].tolist()


def wait_for_progress(
    run_dir: Path, until: Callable[[dict[str, Any]], bool], *, process: subprocess.Popen
) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "trainer ended before the awaited progress"
        if (run_dir / "progress.json").exists():
            progress = read_progress(run_dir)
            if until(progress):
                return progress
        time.sleep(0.02)
    raise AssertionError(f"no such progress in {run_dir} within 60 s")


def signal_at_step(process: subprocess.Popen, *, step: int, signal_number: int) -> None:
    """Signal once the trainer prints an episode ending at or after `step` (deterministic)."""
    assert process.stdout is not None
    for line in process.stdout:
        match = re.match(r"global_step=(\d+)", line)
        if match and int(match.group(1)) >= step:
            process.send_signal(signal_number)
            break
    process.stdout.read()
    process.wait(timeout=60)


# ---- progress.json -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    assert train_in_process(run_dir, *RUN) == 0
    return run_dir


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A run stopped by SIGTERM in the training phase; tests copy it before resuming it."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    process = start_trainer(run_dir, *RUN)
    signal_at_step(process, step=850, signal_number=signal.SIGTERM)
    assert process.returncode == 128 + signal.SIGTERM
    return run_dir


def copy_run(run_dir: Path, destination: Path) -> Path:
    shutil.copytree(run_dir, destination)
    return destination


def test_finished_run_progress_matches_its_event_files(finished_run):
    progress = read_progress(finished_run)
    returns = episodic_returns(finished_run)
    assert len(returns) > RETURN_WINDOW  # so the window has dropped its oldest episodes
    assert progress["schema_version"] == 1
    assert progress["state"] == "completed"
    assert progress["global_step"] == progress["total_timesteps"] == TOTAL
    assert progress["episodes"] == len(returns)
    window = returns[-RETURN_WINDOW:]
    assert progress["recent_returns"] == {
        "window": RETURN_WINDOW,
        "count": RETURN_WINDOW,
        "mean": pytest.approx(sum(window) / len(window), rel=1e-12),
    }
    assert progress["last_checkpoint"]["global_step"] == 900  # the last periodic one
    complete = json.loads((finished_run / "complete.json").read_text())
    assert progress["elapsed_seconds"] == pytest.approx(complete["elapsed_seconds"])
    assert progress["cleanrl_sps"] == int(TOTAL / progress["elapsed_seconds"])
    assert progress["hostname"] == socket.gethostname() and progress["pid"] > 0
    assert 0 <= time.time() - progress["updated_unix_time"] < 120
    umask = os.umask(0)
    os.umask(umask)
    assert (finished_run / "progress.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert not list(finished_run.glob(".progress.json.*"))  # no temporary left behind


def test_stopped_run_says_stopped_at_its_checkpoint(stopped_run):
    progress = read_progress(stopped_run)
    metadata = json.loads((stopped_run / "metadata.json").read_text())
    assert progress["state"] == "stopped"
    assert 850 < progress["global_step"] < TOTAL
    assert progress["global_step"] == metadata["sessions"][-1]["end_step"]
    assert progress["last_checkpoint"]["global_step"] == progress["global_step"]
    assert progress["episodes"] == len(episodic_returns(stopped_run))


def test_resumed_run_reports_the_uninterrupted_returns_window(stopped_run, finished_run, tmp_path):
    run_dir = copy_run(stopped_run, tmp_path / "run")
    assert train_in_process(run_dir, *RUN) == 0
    resumed, uninterrupted = read_progress(run_dir), read_progress(finished_run)
    assert resumed["state"] == "completed"
    assert resumed["session_start_step"] == read_progress(stopped_run)["global_step"]
    assert resumed["episodes"] == uninterrupted["episodes"]
    assert resumed["recent_returns"] == uninterrupted["recent_returns"]


def test_checkpoint_without_progress_state_still_resumes(stopped_run, tmp_path):
    """Checkpoints written before progress.json existed (format 1): the window restarts at the
    resume."""
    run_dir = copy_run(stopped_run, tmp_path / "run")
    state_path = run_dir / "checkpoint" / "state.pt"
    state = load_state(state_path)
    del state["progress"]
    write_format_1_state(state_path, state)
    assert train_in_process(run_dir, *RUN) == 0
    progress = read_progress(run_dir)
    returns_after = [
        value
        for step, value in zip(*_episode_steps_and_returns(run_dir), strict=True)
        if step >= progress["session_start_step"]
    ]
    assert progress["state"] == "completed"
    assert progress["episodes"] == len(returns_after) > 0
    assert progress["recent_returns"]["mean"] == pytest.approx(
        sum(returns_after) / len(returns_after), rel=1e-12
    )


def _episode_steps_and_returns(run_dir: Path) -> tuple[list[int], list[float]]:
    scalars = read_run_scalars(run_dir)
    episodes = scalars[scalars["tag"] == "charts/episodic_return"]
    return episodes["step"].tolist(), episodes["value"].tolist()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"total_timesteps": 0}, "total_timesteps must be an integer >= 1, got 0"),
        ({"learning_starts": -1}, "learning_starts must be an integer >= 0, got -1"),
        ({"start_step": 2000}, "start_step 2000 is past total_timesteps 1000"),
        ({"saved": {"returns": 3}}, "checkpoint progress state is malformed"),
    ],
)
def test_progress_rejects_bad_arguments(tmp_path, arguments, message):
    good = {"path": tmp_path / "p.json", "total_timesteps": 1000, "learning_starts": 10}
    with pytest.raises(ValueError, match=re.escape(message)):
        RunProgress(**{"start_step": 0, **good, **arguments})


def test_progress_write_rejects_an_unknown_state(tmp_path):
    progress = RunProgress(
        path=tmp_path / "p.json", total_timesteps=10, learning_starts=0, start_step=0
    )
    with pytest.raises(ValueError, match="state must be one of .* got 'paused'"):
        progress.write(state="paused", global_step=1, elapsed_seconds=1.0)  # type: ignore[arg-type]
    assert not (tmp_path / "p.json").exists()


def test_progress_rate_and_write_cadence(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    # Monotonic times of: the session start; each update's check, and its write if it writes.
    clock = iter([99.0, 100.0, 100.0, 100.5, 101.0, 101.0, 102.0, 102.0, 103.0, 103.0])
    monkeypatch.setattr("sacbench.training.progress.time.monotonic", lambda: next(clock))
    progress = RunProgress(path=path, total_timesteps=2000, learning_starts=1000, start_step=0)
    progress.update(global_step=100, elapsed_seconds=1.0)  # the first is always written
    progress.update(global_step=200, elapsed_seconds=1.5)  # half a second later: skipped
    assert json.loads(path.read_text())["global_step"] == 100
    progress.update(global_step=300, elapsed_seconds=2.0)
    written = json.loads(path.read_text())
    assert written["global_step"] == 300
    # Steps per second since the session started, at 99.0 from step 0.
    assert written["sps"] == 150.0 and written["sps_window_seconds"] == 2.0
    # Training is slower than random actions: its rate is measured from its first write on.
    progress.update(global_step=1100, elapsed_seconds=3.0)
    assert json.loads(path.read_text())["sps"] is None
    progress.update(global_step=1300, elapsed_seconds=4.0)
    assert json.loads(path.read_text())["sps"] == 200.0


def test_progress_line_at_most_every_ten_seconds_with_step_share_rate_eta_and_last_return(
    tmp_path, monkeypatch, capsys
):
    now = [1000.0]
    monkeypatch.setattr("sacbench.training.progress.time.monotonic", lambda: now[0])
    progress = RunProgress(
        path=tmp_path / "p.json", total_timesteps=10_000, learning_starts=100, start_step=2000
    )
    lines = []

    def line_at(seconds: float, step: int) -> str:
        now[0] = 1000.0 + seconds
        progress.print_line(global_step=step, label="seed=3 ")
        lines.append(capsys.readouterr().out)
        return lines[-1]

    assert line_at(9.99, 2500) == ""  # under PROGRESS_LINE_SECONDS since the session began
    # 1,000 steps in the session's first 10 s: 100 SPS, 7,000 steps left.
    assert line_at(10.0, 3000) == (
        "seed=3 step=3000/10000 (30.0%), SPS=100.0, ETA=1m10s, last_return=none yet\n"
    )
    progress.record_episode(episodic_return=12.25)
    progress.record_episode(episodic_return=-3.5)
    assert line_at(15.0, 3400) == ""
    # The rate since the previous line, not since the start: 500 steps in 20 s.
    assert line_at(30.0, 3500) == (
        "seed=3 step=3500/10000 (35.0%), SPS=25.0, ETA=4m20s, last_return=-3.50\n"
    )


# ---- python -m sacbench.status -------------------------------------------------------------------


def status(project: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sacbench.status", *arguments],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )


def parse_rows(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    """{(variant, seed): {header: cell}} from the table (cells are 2+ spaces apart)."""
    rows = {}
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= len(HEADERS) - 1 and cells[1] == ENV:
            row = dict(zip(HEADERS, cells, strict=False))
            rows[(row["variant"], row["seed"])] = row
    return rows


def total_line(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("total:")]
    return line


def write_config(project: Path, config: dict[str, Any], name: str = "config.yaml") -> None:
    project.mkdir(parents=True, exist_ok=True)
    (project / name).write_text(yaml.safe_dump(config))


@pytest.fixture
def project(tmp_path) -> Path:
    """Variant "sac": seeds 1-4 (done, stopped, failed, pending); "long": the live run."""
    write_config(
        tmp_path,
        {
            "env_ids": [ENV],
            "seeds": [1, 2, 3, 4],
            "results_dir": "out",
            "train": TRAIN,
            "variants": {"sac": {}, "long": LONG_TRAIN},
        },
    )
    return tmp_path


def run_dir_of(project: Path, variant: str, seed: int) -> Path:
    return project / "out" / "runs" / variant / ENV / str(seed)


def make_failed_run(run_dir: Path, *extra: str) -> None:
    """A real error mid-run: a file where the checkpoint folder should be, so the first
    checkpoint fails inside the training loop."""
    failing = (*LONG, "--checkpoint-interval", "500", *extra)
    process = subprocess.Popen(train_command(run_dir, *failing), stdout=subprocess.DEVNULL)
    try:
        wait_for_progress(run_dir, lambda p: p["global_step"] < 500, process=process)
        (run_dir / "checkpoint").write_text("in the way")
        assert process.wait(timeout=60) == 2  # an error message, not a traceback
    finally:
        process.kill()


def test_status_shows_each_state_of_real_runs(project, finished_run, stopped_run):
    copy_run(finished_run, run_dir_of(project, "sac", 1))
    # Seed 1's run where the config wants seed 2: another run, whatever its own state.
    copy_run(stopped_run, run_dir_of(project, "sac", 2))
    failed_dir = run_dir_of(project, "long", 3)
    make_failed_run(failed_dir, "--seed", "3")
    assert read_progress(failed_dir)["state"] == "failed"
    live_dir = run_dir_of(project, "long", 1)
    live = subprocess.Popen(
        train_command(live_dir, *LONG, "--checkpoint-interval", "100000"), stdout=subprocess.DEVNULL
    )
    try:
        # Several writes in the random-action phase, so there is a current SPS.
        wait_for_progress(live_dir, lambda p: p["global_step"] >= 300, process=live)
        running = status(project)
        as_data = status(project, "--json")
        live.kill()
        live.wait(timeout=60)
    finally:
        live.kill()
    assert running.returncode == 0, running.stderr
    rows = parse_rows(running.stdout)
    assert {key: row["state"] for key, row in rows.items()} == {
        ("sac", "1"): "done",
        ("sac", "2"): "differs",
        ("sac", "3"): "pending",
        ("sac", "4"): "pending",
        ("long", "1"): "running",
        ("long", "2"): "pending",
        ("long", "3"): "failed",
        ("long", "4"): "pending",
    }
    done, other, failed, live_row = (
        rows[("sac", "1")], rows[("sac", "2")], rows[("long", "3")], rows[("long", "1")]
    )  # fmt: skip
    assert done["step"] == f"{TOTAL:,}/{TOTAL:,}" and done["%"] == "100.0"
    finished_mean = read_progress(finished_run)["recent_returns"]["mean"]
    assert done["return (last 100)"] == f"{finished_mean:.1f}"
    stopped_step = read_progress(stopped_run)["global_step"]
    # Its own steps, and no share of the config's run.
    assert other["step"] == f"{stopped_step:,}/{TOTAL:,}" and other["%"] == "–"
    assert other["note"] == "failed run of other args: seed 1 (config 2)"
    assert failed["note"].startswith("error: FileExistsError")
    assert rows[("sac", "3")]["step"] == f"0/{TOTAL:,}" and rows[("sac", "3")]["SPS"] == "–"
    live_step = int(live_row["step"].split("/")[0].replace(",", ""))
    assert float(live_row["SPS"]) > 0 and live_row["ETA"] != "–"
    check_total_line(running.stdout, rows, running_sps=float(live_row["SPS"]))
    assert "1 done, 1 running, 4 pending, 1 failed, 0 stale, 1 differs" in total_line(
        running.stdout
    )
    check_json_rows(as_data, rows)

    # The killed trainer left "running" behind: stale once the threshold has passed.
    updated = read_progress(live_dir)["updated_unix_time"]
    time.sleep(max(0.0, updated + 1.2 - time.time()))
    stale = parse_rows(status(project, "--stale-after", "1").stdout)[("long", "1")]
    assert stale["state"] == "stale" and stale["note"].startswith("no update for")
    last_step = read_progress(live_dir)["global_step"]  # it ran on until the kill
    assert stale["step"] == f"{last_step:,}/{LONG_TOTAL:,}" and last_step >= live_step
    still_running = status(project)  # the default threshold has not passed yet
    assert parse_rows(still_running.stdout)[("long", "1")]["state"] == "running"


def check_total_line(
    stdout: str, rows: dict[tuple[str, str], dict[str, str]], *, running_sps: float
) -> None:
    """Overall % = steps done / steps of all runs; ETA from the steps left at the summed SPS."""
    done_steps = total_steps = 0
    for row in rows.values():
        step, total = (int(part.replace(",", "")) for part in row["step"].split("/"))
        if row["state"] == "differs":  # none of the config's steps; the runs of "sac" only
            step, total = 0, TOTAL
        done_steps, total_steps = done_steps + step, total_steps + total
    line = total_line(stdout)
    assert f"{100 * done_steps / total_steps:.1f}% of steps done" in line
    assert f"({total_steps - done_steps:,} steps left at {running_sps:.1f} steps/s)" in line


def check_json_rows(completed: subprocess.CompletedProcess, rows: dict) -> None:
    """--json: the table's rows as data (the live run moved on between the two calls)."""
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    by_key = {(run["variant"], str(run["seed"])): run for run in data["runs"]}
    assert by_key.keys() == rows.keys()
    for key, row in rows.items():
        run = by_key[key]
        assert run["state"] == row["state"] and run["note"] == row.get("note", ""), key
        if run["state"] not in ("running", "differs"):
            assert f"{run['global_step']:,}/{run['total_timesteps']:,}" == row["step"], key
    other = by_key[("sac", "2")]
    assert other["differs"] == {"seed": {"run": 1, "config": 2}}
    assert other["percent"] is None and other["run_total_timesteps"] == TOTAL
    assert data["total"]["states"]["differs"] == 1 and data["total"]["runs"] == len(rows)


NOW = 1_800_000_000.0
STARTED = dt.datetime.fromtimestamp(NOW - 7200, dt.UTC).isoformat()


@pytest.mark.parametrize(
    ("complete", "progress", "session", "expected"),
    [
        (True, {"state": "running", "updated_unix_time": 0}, {}, ("done", "")),
        (False, {}, {"exit_status": "completed"}, ("done", "complete.json missing")),
        (False, {}, {"exit_status": "error: OSError: disk full"}, ("failed", "error: OSError")),
        # metadata.json's end of a session is written last, so it outranks progress.json
        (False, {"state": "running", "updated_unix_time": NOW}, {"exit_status": "signal SIGUSR1",
         "end_step": 5}, ("failed", "stopped by SIGUSR1 at step 5, resumable")),
        (False, {"state": "running", "updated_unix_time": NOW - 601}, {"exit_status": "running"},
         ("stale", "no update for 10m01s")),
        (False, {"state": "running", "updated_unix_time": NOW - 599}, {}, ("running", "")),
        (False, {}, {"exit_status": "running", "started_at": STARTED}, ("stale", "started 2h00m")),
        (False, {"state": "paused"}, {}, ("unknown", "progress.json state 'paused'")),
    ],
)  # fmt: skip
def test_classify_from_the_records(complete, progress, session, expected):
    state, note = classify(
        complete=complete, progress=progress, session=session, now=NOW, stale_after=600
    )
    assert state == expected[0] and note.startswith(expected[1])


def test_what_defines_a_run_is_compared_with_its_record_for_trainer_and_command_variants():
    config = validated_config(
        {
            "env_ids": [ENV],
            "train": {"total_timesteps": 1000, "learning_starts": 500},
            "variants": {"sac": {"gamma": 0.9}, "cleanrl": {"command": "python sac.py"}},
        },
        schema=load_schema(SCHEMA_PATH),
    )
    trainer = expected_run(config, variant="sac", env_id=ENV, seed=2)
    assert trainer["exp_name"] == "sac" and trainer["gamma"] == 0.9 and "run_dir" not in trainer
    recorded = {**trainer, "gamma": 0.99, "threads": 4}  # threads: a session setting
    del recorded["precision"]  # recorded before it existed: stands for fp32, the config's
    assert differing_args(trainer, {"args": recorded}) == {"gamma": (0.99, 0.9)}
    assert differing_args(trainer, {}) == {}  # nothing recorded yet
    command = expected_run(config, variant="cleanrl", env_id=ENV, seed=2)
    argv = command["argv"]
    assert argv[:6] == ["python", "sac.py", "--env-id", ENV, "--seed", "2"]
    assert differing_args(command, {"command": {"argv": argv}}) == {}
    other = [*argv[:-1], "999"]
    assert differing_args(command, {"command": {"argv": other}}) == {"argv": (other, argv)}


def test_a_missing_completion_record_names_the_snakemake_command_that_restores_it(tmp_path):
    """The target comes before --configfile and --config, which take several values each (the
    command itself runs in tests/test_rerun_safety.py)."""
    key = RunKey("v", ENV, 1, 1000)
    run_dir = key.run_dir(tmp_path / "elsewhere")
    run_dir.mkdir(parents=True)
    (run_dir / "metadata.json").write_text(
        json.dumps({"sessions": [{"exit_status": "completed", "end_step": 1000}]})
    )
    options = parse_args(["--configfile", "a b.yaml", "--results-dir", str(tmp_path / "elsewhere")])
    extra = snakemake_options(options, {"results_dir": "results"})
    row = read_run_status(
        key, results_dir=tmp_path / "elsewhere", now=NOW, stale_after=600, snakemake_options=extra
    )
    assert (row.state, row.global_step) == ("done", 1000)
    assert row.note == (
        f"complete.json missing: `snakemake --cores 1 {run_dir}/complete.json --configfile "
        f"'a b.yaml' --config results_dir={tmp_path}/elsewhere` restores it, without training"
    )


def test_damaged_records_give_a_row_not_a_crash(tmp_path):
    key = RunKey("v", ENV, 1, 1000)
    run_dir = key.run_dir(tmp_path)
    run_dir.mkdir(parents=True)
    (run_dir / "metadata.json").write_text("{not json")
    (run_dir / "progress.json").write_text(
        json.dumps({"state": "running", "updated_unix_time": NOW, "global_step": 400, "sps": 8.0})
    )
    running = read_run_status(key, results_dir=tmp_path, now=NOW, stale_after=600)
    assert (running.state, running.global_step, running.eta_seconds) == ("running", 400, 75.0)
    assert running.note.startswith("metadata.json is not JSON")
    (run_dir / "progress.json").write_text("[1, 2]")
    unknown = read_run_status(key, results_dir=tmp_path, now=NOW, stale_after=600)
    assert (unknown.state, unknown.note) == ("unknown", "progress.json is not a JSON object")


def test_status_merges_configfiles_like_snakemake(tmp_path):
    """The real config.yaml with the smoke preset over it: one seed, its steps, results/smoke."""
    smoke_steps = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())["train"][
        "total_timesteps"
    ]
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    shutil.copytree(REPO / "config", tmp_path / "config")
    completed = status(tmp_path, "--configfile", "config/smoke.yaml")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("results/smoke/runs at ")
    rows = _rows_of_all_envs(completed.stdout)
    assert len(rows) == 6 and all(row["seed"] == "1" for row in rows.values())
    assert all(
        row["step"] == f"0/{smoke_steps:,}" and row["state"] == "pending" for row in rows.values()
    ), rows
    # A later configfile: lists replace, mappings merge key by key; --results-dir wins.
    write_config(tmp_path, {"seeds": [7], "train": {"total_timesteps": 1500}}, "more.yaml")
    completed = status(
        tmp_path, "--configfile", "config/smoke.yaml", "more.yaml", "--results-dir", "elsewhere"
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("elsewhere/runs at ")
    rows = _rows_of_all_envs(completed.stdout)
    assert {row["seed"] for row in rows.values()} == {"7"}
    assert {row["step"] for row in rows.values()} == {"0/1,500"}


def _rows_of_all_envs(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    rows = {}
    for line in stdout.splitlines()[3:-1]:
        row = dict(zip(HEADERS, re.split(r"\s{2,}", line.strip()), strict=False))
        rows[(row["env"], row["seed"])] = row
    return rows


def test_watch_reprints_until_interrupted(project):
    process = subprocess.Popen(
        [sys.executable, "-m", "sacbench.status", "--watch", "0.2"],
        cwd=project,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert process.stdout is not None
    printed = []
    for line in process.stdout:  # interrupt after two tables, however slow the start
        printed.append(line)
        if sum(text.startswith("total:") for text in printed) == 2:
            break
    process.send_signal(signal.SIGINT)
    stdout = "".join(printed) + process.communicate(timeout=60)[0]
    assert process.returncode == 0
    assert stdout.count("total: 8 runs") >= 2
    assert "\033[" not in stdout  # not a terminal: no screen clearing in a log


@pytest.mark.parametrize(
    ("arguments", "config", "message"),
    [
        (["--configfile", "nowhere.yaml"], None, "--configfile nowhere.yaml: no such file"),
        (
            ["--watch", "0"],
            None,
            "--watch: expected a positive number of seconds, got '0'",
        ),
        (["--watch", "soon"], None, "argument --watch: expected a number of seconds, got 'soon'"),
        (["--stale-after", "-5"], None, "argument --stale-after: expected a positive number"),
        ([], {"seeds": [-1]}, "config.yaml: invalid sacbench config:\n  - seeds[0]: -1 is less"),
        ([], {"train": {"batch_size": "x"}}, "train.batch_size: 'x' is not of type 'integer'"),
        ([], {"results": "out"}, "unknown key 'results'"),
        (
            [],
            ["a", "list"],
            "config.yaml: expected a mapping of keys, got ['a', 'list']",
        ),
    ],
    ids=[
        "missing-configfile",
        "watch-zero",
        "watch-word",
        "stale-negative",
        "bad-seed",
        "bad-batch-size",
        "unknown-key",
        "not-a-mapping",
    ],  # fmt: skip
)
def test_bad_input_is_named_with_exit_status_2(project, arguments, config, message):
    if config is not None:
        (project / "config.yaml").write_text(yaml.safe_dump(config))
    completed = status(project, *arguments)
    assert completed.returncode == 2
    assert message in completed.stderr
    assert completed.stdout == ""


def test_no_config_in_the_current_folder(tmp_path):
    completed = status(tmp_path)
    assert completed.returncode == 2
    assert f"no config.yaml in {tmp_path}" in completed.stderr


def test_status_starts_without_torch():
    """`python -m sacbench.status` reads records only; importing torch would add about a second
    to every call, and to every refresh a user's `watch` makes."""
    code = "import sys, sacbench.pipeline.status; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "'sacbench.pipeline.external'" in loaded  # the command wrapper's records, which it reads
    assert "'torch'" not in loaded

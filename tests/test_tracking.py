"""--track: real training runs recorded by W&B offline (WANDB_MODE=offline, no network), read
back with wandb's own transaction-log reader; and untracked runs that never load wandb.

The tracked run is trained in two sessions (stopped by SIGTERM, then resumed), and compared with
an uninterrupted untracked run of the same arguments.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sacbench.sac.args import ARG_NAMES, SESSION_FIELDS, Args, validate_args
from sacbench.training.run_dir import KILL_POINT_VARIABLE
from sacbench.training.tracking import (
    RUN_ID_FILE_NAME,
    WANDB_DIR_NAME,
    run_tags,
    stable_run_id,
    version_tag,
)
from tests.trainer_runs import read_scalars, reproducible, stop_once_it_prints
from tests.workflow_copies import workflow_copy

# A budget that reaches the update: log points at steps 1100, 1200 and 1300.
TINY_RUN = (
    "--env-id", "InvertedPendulum-v4",
    "--total-timesteps", "1400",
    "--learning-starts", "1000",
    "--batch-size", "64",
    "--buffer-size", "1400",
)  # fmt: skip
EXTRA_TAGS = "benchmark,pr-424"  # WANDB_TAGS, as CleanRL's benchmark utility sets it
WANDB = str(Path(sys.executable).parent / "wandb")


# ---- helpers ---------------------------------------------------------------------------------


def offline_environment(home: Path) -> dict[str, str]:
    """W&B offline, with its settings and caches under `home` and no credentials at all."""
    environment = dict(os.environ)
    for key in [key for key in environment if key.startswith("WANDB_")]:
        del environment[key]
    environment.update(
        WANDB_MODE="offline",
        WANDB_TAGS=EXTRA_TAGS,
        WANDB_CONFIG_DIR=str(home / "config"),
        WANDB_CACHE_DIR=str(home / "cache"),
        WANDB_DATA_DIR=str(home / "data"),
        HOME=str(home),
        PYTHONWARNINGS="ignore::DeprecationWarning",
        PATH=f"{Path(sys.executable).parent}:{environment['PATH']}",
    )
    return environment


def trainer(run_dir: Path, *extra: str) -> list[str]:
    """The trainer, printing every module it imports (-X importtime, on stderr)."""
    command = [sys.executable, "-X", "importtime", "-m", "sacbench.train"]
    return [*command, "--run-dir", str(run_dir), *TINY_RUN, *extra]


def imported_modules(output: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in output.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def loads_wandb(output: str) -> bool:
    return any(name == "wandb" or name.startswith("wandb.") for name in imported_modules(output))


def offline_sessions(run_dir: Path) -> list[Path]:
    """The run dir's offline W&B sessions, oldest first (their names start with the time)."""
    return sorted((run_dir / WANDB_DIR_NAME).glob("offline-run-*"))


def wandb_records(session: Path, environment: dict[str, str]) -> list[dict[str, Any]]:
    """Every record of a session's .wandb transaction log, read by `wandb leet inspect --json`."""
    completed = subprocess.run(
        [WANDB, "leet", "inspect", "--json", str(session)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]


def records_of(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record[kind] for record in records if record["type"] == kind]


def history_points(records: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """{tag: {global_step: value}} of a session's history rows."""
    points: dict[str, dict[int, float]] = {}
    for row in records_of(records, "history"):
        item = row["item"]
        for tag, value in item.items():
            if not tag.startswith("_") and tag != "global_step":
                assert item["global_step"] not in points.get(tag, {}), (tag, item)
                points.setdefault(tag, {})[item["global_step"]] = value
    return points


# ---- the runs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def untracked(tmp_path_factory, home) -> tuple[Path, str]:
    """An uninterrupted run without --track, and its output (imports included)."""
    run_dir = tmp_path_factory.mktemp("untracked") / "run"
    completed = subprocess.run(
        trainer(run_dir), capture_output=True, text=True, env=offline_environment(home)
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    return run_dir, completed.stdout + completed.stderr


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, home) -> tuple[Path, list[str]]:
    """The same run with --track in three sessions, and their outputs (imports included):
    1. stopped by SIGTERM after its first log point (it checkpoints, then stops);
    2. resumed, checkpointed at step 1200 and SIGKILLed once every step is done and its event
       file is closed, before the run is recorded as finished;
    3. resumed from step 1200: it retrains and logs again the steps from 1200 on."""
    run_dir = tmp_path_factory.mktemp("tracked") / "run"
    environment = offline_environment(home)
    command = trainer(run_dir, "--track", "--checkpoint-interval", "1200")
    first = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )
    assert first.stdout is not None
    output = []
    for line in first.stdout:
        output.append(line)
        episode = re.match(r"global_step=(\d+), episodic_return=", line)
        if episode and int(episode.group(1)) >= 1100:  # an episode past the first log point
            first.send_signal(signal.SIGTERM)
            break
    output.append(first.communicate(timeout=120)[0])
    assert first.returncode == 128 + signal.SIGTERM, "".join(output)[-4000:]
    outputs = ["".join(output)]
    for kill_point, returncode in (("before-final-state", -signal.SIGKILL), (None, 0)):
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=environment | ({KILL_POINT_VARIABLE: kill_point} if kill_point else {}),
        )
        outputs.append(completed.stdout + completed.stderr)
        assert completed.returncode == returncode, outputs[-1][-4000:]
    return run_dir, outputs


@pytest.fixture(scope="module")
def sessions(tracked, home) -> list[list[dict[str, Any]]]:
    run_dir, _ = tracked
    return [wandb_records(path, offline_environment(home)) for path in offline_sessions(run_dir)]


# ---- what the runs show ----------------------------------------------------------------------


@pytest.mark.slow
def test_an_untracked_run_never_imports_wandb(untracked, tracked):
    run_dir, output = untracked
    assert imported_modules(output) >= {"sacbench.training.loop", "torch"}, output[-2000:]
    assert not loads_wandb(output)
    assert not (run_dir / WANDB_DIR_NAME).exists() and not (run_dir / RUN_ID_FILE_NAME).exists()
    # The same check sees wandb where it is loaded: it can fail.
    assert all(loads_wandb(session_output) for session_output in tracked[1])


@pytest.mark.slow
def test_a_training_run_never_imports_the_report_libraries(untracked):
    """pandas and matplotlib serve the report; importing pandas alone would add about 0.3 s of
    CPU to every trainer start (Intel Xeon Ice Lake)."""
    _, output = untracked
    modules = imported_modules(output)
    assert "sacbench.events" in modules, output[-2000:]  # the module that reads events for them
    assert not {name.split(".")[0] for name in modules} & {"pandas", "matplotlib"}


@pytest.mark.slow
def test_tracking_does_not_change_what_a_run_computes(untracked, tracked):
    assert reproducible(read_scalars(tracked[0])) == reproducible(read_scalars(untracked[0]))


TOTAL_TIMESTEPS = int(TINY_RUN[TINY_RUN.index("--total-timesteps") + 1])


def session_steps(run_dir: Path) -> list[range]:
    """The steps each session logged, from metadata.json: the steps it trained (a SIGKILLed one
    trained them all) and, if it reached the end, the final evaluation's, at total_timesteps."""
    sessions = json.loads((run_dir / "metadata.json").read_text())["sessions"]
    ends = [session["end_step"] or TOTAL_TIMESTEPS for session in sessions]
    return [
        range(session["start_step"], end + 1 if end == TOTAL_TIMESTEPS else end)
        for session, end in zip(sessions, ends, strict=True)
    ]


def event_points(run_dir: Path) -> dict[str, dict[int, np.float32]]:
    """{tag: {step: value}} of the run dir's event files (each step once)."""
    return {
        tag: {step: np.float32(value) for step, value in series}
        for tag, series in read_scalars(run_dir).items()
    }


@pytest.mark.slow
def test_each_session_sends_to_wandb_the_scalars_it_trained(tracked, sessions):
    run_dir, _ = tracked
    assert len(sessions) == 3
    events = event_points(run_dir)
    assert set(events["losses/qf_loss"]) == {1100, 1200, 1300}
    endings = ("stopped", "killed", "finished")
    for records, trained, ending in zip(sessions, session_steps(run_dir), endings, strict=True):
        synced = history_points(records)
        # Only steps it trained: W&B never reads an older session's event file.
        assert all(step in trained for series in synced.values() for step in series)
        if ending == "killed":
            continue  # it sent what W&B had read before the kill (next test)
        for tag, series in events.items():
            # The event file stores float32; W&B reads those numbers.
            expected = {step: value for step, value in series.items() if step in trained}
            sent = {step: np.float32(value) for step, value in synced.get(tag, {}).items()}
            assert sent == expected, tag


@pytest.mark.slow
def test_what_a_killed_session_sent_matches_the_event_file(tracked, sessions):
    """The SIGKILLed session trained to the end; the next one resumed from the checkpoint at
    step 1200 and sent the steps from there again. How much of the killed session W&B holds
    depends on how far it had read the event file, and written its own log, before the kill
    (README; here, with a session of seconds, often nothing); whatever it holds is the event
    file's numbers, and where it overlaps the resumed session, the same computation's."""
    run_dir, _ = tracked
    events = event_points(run_dir)
    _, killed, resumed = (history_points(records) for records in sessions)
    assert session_steps(run_dir)[2].start == 1200
    for tag, series in killed.items():
        for step, value in series.items():
            if step < 1200:
                assert np.float32(value) == events[tag][step], (tag, step)
            elif tag not in ("charts/SPS", "charts/steady_SPS", "charts/elapsed_seconds"):
                assert value == resumed[tag][step], (tag, step)


@pytest.mark.slow
def test_the_offline_run_records_the_args_provenance_and_code_version(tracked, sessions):
    run_dir, _ = tracked
    metadata = json.loads((run_dir / "metadata.json").read_text())
    stopped, _, finished = sessions  # the killed one may hold nothing (next test)
    for records in (stopped, finished):
        (run,) = records_of(records, "run")
        config = {key: value for key, value in run["config"]["update"].items() if key != "_wandb"}
        assert {key: config[key] for key in ARG_NAMES} == metadata["args"]
        assert config["track"] is True
        assert config["sacbench"] == metadata["sacbench"]
        assert config["versions"] == metadata["versions"]
        assert config["host"]["hostname"] == metadata["host"]["hostname"]
        tag = version_tag(version=metadata["sacbench"])
        assert run["tags"] == [tag, "benchmark", "pr-424"]
        assert (
            metadata["sacbench"]["git_describe"] in tag or not metadata["sacbench"]["git_describe"]
        )
        assert run["project"] == "sacbench"
        assert run["display_name"] == "InvertedPendulum-v4__sac_continuous_action__1"
        # Charts are drawn against the trainer's step, as in TensorBoard.
        metrics = records_of(records, "metric")
        assert {"glob_name": "*", "step_metric": "global_step"}.items() <= next(
            metric for metric in metrics if metric.get("glob_name") == "*"
        ).items()


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(tracked, sessions):
    run_dir, _ = tracked
    run_id = (run_dir / RUN_ID_FILE_NAME).read_text().strip()
    assert [path.name.rsplit("-", 1)[1] for path in offline_sessions(run_dir)] == [run_id] * 3
    stopped, killed, finished = sessions
    assert [records_of(records, "run")[0]["run_id"] for records in (stopped, finished)] == [
        run_id
    ] * 2
    # Stopped (preempted, to resume) and finished; the SIGKILLed one wrote no exit record.
    exits = [
        [end.get("exit_code", 0) for end in records_of(records, "exit")] for records in sessions
    ]
    assert exits == [[128 + signal.SIGTERM], [], [0]]
    assert len(records_of(stopped, "preempting")) == 1
    # `wandb sync` would upload the three sessions (into the one run, oldest first).
    dry_run = subprocess.run(
        [WANDB, "sync", "--dry-run", str(run_dir / WANDB_DIR_NAME)],
        capture_output=True,
        text=True,
        env=offline_environment(run_dir.parent),
        timeout=120,
    )
    assert "Would sync 3 run(s)" in dry_run.stderr, dry_run.stderr


@pytest.mark.slow
def test_wandb_keeps_no_copy_of_the_event_files(tracked):
    run_dir, _ = tracked
    copies = [path for path in (run_dir / WANDB_DIR_NAME).rglob("*tfevents*")]
    assert copies == []
    assert len(list(run_dir.glob("*tfevents*"))) == 3


@pytest.mark.slow
def test_run_dirs_recorded_before_tracking_existed_are_the_same_run(untracked, tmp_path, home):
    """metadata.json from before the tracking flags: a finished run, not a different one."""
    run_dir = tmp_path / "older"
    shutil.copytree(untracked[0], run_dir)
    metadata = json.loads((run_dir / "metadata.json").read_text())
    for name in ("track", "wandb_project_name", "wandb_entity"):
        del metadata["args"][name]
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    completed = subprocess.run(
        trainer(run_dir, "--track", "--wandb-project-name", "elsewhere"),
        capture_output=True,
        text=True,
        env=offline_environment(home),
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "nothing to do" in completed.stdout
    # A finished run trains nothing, so there is nothing to track.
    assert not (run_dir / WANDB_DIR_NAME).exists()


@pytest.mark.slow
def test_tracking_that_cannot_start_stops_the_trainer_before_training(tmp_path):
    """Online without credentials: a clear error, exit 2, no event file."""
    environment = offline_environment(tmp_path)
    environment["WANDB_MODE"] = "online"
    run_dir = tmp_path / "run"
    completed = subprocess.run(
        trainer(run_dir, "--track"),
        capture_output=True,
        text=True,
        env=environment,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr[-4000:]
    assert "--track: Weights & Biases did not start" in completed.stderr
    assert "WANDB_MODE=offline" in completed.stderr
    assert not list(run_dir.glob("*tfevents*")) and not (run_dir / "metadata.json").exists()


# ---- the pieces ------------------------------------------------------------------------------


def test_tracking_flags_are_session_settings_with_cleanrl_names():
    assert {"track", "wandb_project_name", "wandb_entity"} <= SESSION_FIELDS
    args = Args()
    assert (args.track, args.wandb_project_name, args.wandb_entity) == (False, "sacbench", None)


@pytest.mark.parametrize("name", ["", "a/b", "what?", "50%"])
def test_a_project_name_wandb_refuses_is_refused_by_name(name: str):
    (problem,) = validate_args(Args(wandb_project_name=name))
    assert problem.startswith("--wandb-project-name") and repr(name) in problem


def test_an_empty_entity_is_refused():
    (problem,) = validate_args(Args(wandb_entity=" "))
    assert problem.startswith("--wandb-entity")


def test_the_version_tag_names_describe_or_the_version_and_dirty_state():
    version = {"version": "0.1.0", "git_describe": "v0.1.0-3-g35d6d99-dirty", "git_dirty": True}
    assert version_tag(version=version) == "sacbench-v0.1.0-3-g35d6d99-dirty"
    outside_git = {"version": "0.1.0", "git_describe": None, "git_dirty": None}
    assert version_tag(version=outside_git) == "sacbench-0.1.0"
    assert len(version_tag(version={"version": "0", "git_describe": "x" * 100})) == 64


def test_wandb_tags_from_the_environment_follow_the_version_tag():
    version = {"version": "0.1.0", "git_describe": "abc1234"}
    tags = run_tags(version=version, environment={"WANDB_TAGS": "a, b,,sacbench-abc1234"})
    assert tags == ["sacbench-abc1234", "a", "b"]
    assert run_tags(version=version, environment={}) == ["sacbench-abc1234"]


def test_the_run_id_is_made_once_and_kept(tmp_path: Path):
    first = stable_run_id(run_dir=tmp_path)
    assert len(first) == 8 and first.isalnum()
    assert stable_run_id(run_dir=tmp_path) == first
    (tmp_path / RUN_ID_FILE_NAME).write_text("no/good\n")
    with pytest.raises(RuntimeError, match=RUN_ID_FILE_NAME):
        stable_run_id(run_dir=tmp_path)


# ---- the README's commands -------------------------------------------------------------------

README_TRAINER = (
    "python -m sacbench.train --env-id Hopper-v4 --seed 1 --run-dir runs/hopper-1 --track"
)
README_PIPELINE = "snakemake --cores 18 --configfile config/wandb.yaml"
README_DRY_SYNC = "wandb sync --dry-run results/runs/sac_continuous_action/Hopper-v4/1/wandb"
README_SYNC = "wandb sync results/runs/*/*/*/wandb"


def as_typed(
    workdir: Path, command: str, environment: dict[str, str]
) -> subprocess.CompletedProcess:
    """`command` in bash, as a user types it (globs included), in `workdir`."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )


@pytest.mark.slow
def test_readme_tracked_trainer_command_starts_and_stops_cleanly(tmp_path: Path):
    """The README's tracked trainer command trains 1M steps: started offline, it gets going,
    and stops on SIGTERM with a checkpoint and a W&B session marked preempted."""
    returncode, output = stop_once_it_prints(
        ["bash", "-c", f"exec {README_TRAINER}"],
        line_prefix="global_step=",
        cwd=tmp_path,
        env=offline_environment(tmp_path),
    )
    assert returncode == 128 + signal.SIGTERM, output[-4000:]
    run_dir = tmp_path / "runs" / "hopper-1"
    assert (run_dir / "checkpoint" / "state.pt").is_file()
    (session,) = offline_sessions(run_dir)
    records = wandb_records(session, offline_environment(tmp_path))
    assert records_of(records, "run")[0]["display_name"] == "Hopper-v4__sac_continuous_action__1"
    assert records_of(records, "preempting") and records_of(records, "exit")


@pytest.mark.slow
def test_readme_offline_pipeline_then_sync(tmp_path: Path):
    """The README's offline commands in a tiny copy of the workflow (one Hopper-v4 run that
    reaches the update): every run tracked through the config, then found by `wandb sync`,
    which here, with no account, stops at its request for a login."""
    config = {
        "env_ids": ["Hopper-v4"],
        "seeds": [1],
        "train": {"total_timesteps": 1300, "learning_starts": 1000, "batch_size": 64,
                  "buffer_size": 1300},
    }  # fmt: skip
    workdir = workflow_copy(tmp_path, config)
    offline = offline_environment(tmp_path / "home")
    completed = as_typed(workdir, README_PIPELINE, offline)
    assert completed.returncode == 0, completed.stderr[-4000:]
    run_dir = workdir / "results" / "runs" / "sac_continuous_action" / "Hopper-v4" / "1"
    log = workdir / "results" / "logs" / "train" / "sac_continuous_action" / "Hopper-v4" / "1.log"
    assert "Tracking run with wandb" in log.read_text()
    (session,) = offline_sessions(run_dir)
    records = wandb_records(session, offline)
    assert set(history_points(records)["losses/qf_loss"]) == {1100, 1200}
    assert records_of(records, "run")[0]["config"]["update"]["track"] is True
    assert (workdir / "results" / "sac.md").is_file()

    # W&B's log of the run's one session, which both commands must find.
    log_name = f"run-{(run_dir / RUN_ID_FILE_NAME).read_text().strip()}.wandb"
    dry_run = as_typed(workdir, README_DRY_SYNC, offline)
    assert dry_run.returncode == 0, dry_run.stderr
    assert "Would sync 1 run(s)" in dry_run.stderr and log_name in dry_run.stderr, dry_run.stderr

    later = {key: value for key, value in offline.items() if key != "WANDB_MODE"}
    sync = as_typed(workdir, README_SYNC, later)
    assert sync.returncode == 1 and "No API key configured" in sync.stderr, sync.stderr
    assert "Syncing 1 run(s)" in sync.stderr and log_name in sync.stderr, sync.stderr


def test_the_readme_commands_tested_here_are_the_readme_s():
    from tests.test_readme import readme_commands

    commands = readme_commands()
    for command in (README_TRAINER, README_PIPELINE, README_DRY_SYNC, README_SYNC):
        assert command in commands, command

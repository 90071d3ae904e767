"""Command variants: an external CleanRL-style script run by `python -m sacbench.run_command`,
and by the pipeline beside sacbench's own trainer.

The script is tests/cleanrl_style.py's: CleanRL's flags and tags, written with the real
SummaryWriter into runs/{run_name}/ below its working directory, no MuJoCo.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sacbench.events import read_event_file, read_run_scalars
from sacbench.pipeline.external import CommandRun, CommandRunError, script_flags
from sacbench.pipeline.status import classify
from sacbench.results.cli import main as report_main
from sacbench.results.metrics import (
    elapsed_points,
    steady_sps,
    steady_sps_points,
    times_from_wall_clock,
)
from sacbench.results.runs import MetricError, Run, RunKey
from sacbench.tags import LOSS_TAGS, RETURN_TAG, SPS_TAG
from tests.cleanrl_style import EPISODE_STEPS, write_script
from tests.workflow_copies import run_verbatim, workflow_copy

# 1,000 steps with learning_starts 500: SPS and losses at steps 600-900, 20 episodes.
STEPS, LEARNING_STARTS = 1000, 500
ARGS = {"total_timesteps": STEPS, "learning_starts": LEARNING_STARTS, "autotune": False}


def wrapper(
    run_dir: Path,
    script: Path,
    *,
    args: dict = ARGS,
    env: dict | None = None,
    threads: int = 1,
    python_options: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """python -m sacbench.run_command, as the pipeline's run_command rule calls it (with
    `python_options` for the wrapper's own interpreter)."""
    return subprocess.run(
        [sys.executable, *python_options, "-m", "sacbench.run_command", "--run-dir", str(run_dir),
         "--env-id", "Pusher-v4", "--seed", "3", "--threads", str(threads),
         "--args-json", json.dumps(args), "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=300, env=os.environ | (env or {}),
    )  # fmt: skip


def invocations(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_script(tmp_path)


# ---- the wrapper's arguments ---------------------------------------------------------------


def test_flags_are_written_the_way_cleanrl_scripts_parse_them():
    flags = script_flags(
        {"total_timesteps": 1000, "policy_lr": 3e-4, "autotune": False, "cuda": True, "x": "a b"}
    )
    assert flags == ["--total-timesteps", "1000", "--policy-lr", "0.0003", "--no-autotune",
                     "--cuda", "--x", "a b"]  # fmt: skip
    for bad in ({"Total": 1}, {"a-b": 1}, {"x": None}, {"x": [1]}):
        with pytest.raises(CommandRunError, match=re.escape(repr(next(iter(bad))))):
            script_flags(bad)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"command": ()}, "command"),
        ({"command": ("python", "")}, "command"),
        ({"env_id": ""}, "--env-id"),
        ({"seed": -1}, "--seed"),
        ({"args": {"seed": 2}}, "seed"),
        ({"args": {"env_id": "Hopper-v4"}}, "env_id"),
    ],
)
def test_a_bad_command_run_is_refused_naming_what(kwargs: dict, named: str):
    fields = {"command": ("python", "x.py"), "env_id": "Pusher-v4", "seed": 1} | kwargs
    with pytest.raises(CommandRunError, match=re.escape(named)):
        CommandRun(**fields)


def test_bad_wrapper_arguments_exit_2_before_anything_runs(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "sacbench.run_command", "--run-dir", str(tmp_path / "run"),
         "--env-id", "Pusher-v4", "--seed", "1", "--args-json", "[1]", "--", "python", "x.py"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "--args-json must be a JSON object" in done.stderr
    assert not (tmp_path / "run").exists()


# ---- one run -------------------------------------------------------------------------------


def test_a_finished_command_records_its_last_logged_step_and_provenance(
    tmp_path: Path, script: Path
):
    run_dir = tmp_path / "run"
    calls = tmp_path / "calls.txt"
    environment = {"FAKE_CLEANRL_INVOCATIONS": str(calls)}
    done = wrapper(run_dir, script, threads=2, env=environment, python_options=("-X", "importtime"))
    assert done.returncode == 0, done.stderr
    # The wrapper itself (its command is another process) never loads torch: it would add about a
    # second of CPU to every job's start. -X importtime lists what the wrapper imported.
    assert re.search(r"\| +sacbench\.training\.run_records$", done.stderr, re.M), done.stderr
    assert not re.search(r"\| +torch$", done.stderr, re.M)
    # Its output went to the wrapper's (the job's log).
    assert f"global_step={STEPS - 1}, episodic_return=" in done.stdout
    # It ran in the run dir, with the job's threads and the pipeline's flags.
    (call,) = invocations(calls)
    assert call.startswith(f"OMP_NUM_THREADS=2 cwd={run_dir.resolve()} ")
    assert call.endswith(
        f"--env-id Pusher-v4 --seed 3 --total-timesteps {STEPS} "
        f"--learning-starts {LEARNING_STARTS} --no-autotune"
    )
    (event_file,) = run_dir.glob("runs/Pusher-v4__*__3__*/events.out.tfevents.*")
    scalars = read_event_file(event_file)
    complete = json.loads((run_dir / "complete.json").read_text())
    assert complete["global_step"] == scalars["step"].max() == STEPS - 1
    assert 0 < complete["elapsed_seconds"] < 300
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["exit_status"] == "completed" and metadata["exit_code"] == 0
    assert metadata["completion"] == complete
    assert metadata["args"] == {"env_id": "Pusher-v4", "seed": 3, **ARGS}
    assert metadata["command"]["words"] == [sys.executable, str(script)]
    assert metadata["command"]["argv"] == [
        sys.executable, str(script), "--env-id", "Pusher-v4", "--seed", "3",
        "--total-timesteps", str(STEPS), "--learning-starts", str(LEARNING_STARTS),
        "--no-autotune",
    ]  # fmt: skip
    assert metadata["host"]["cpu_model"] and metadata["sessions"][0]["external"] is True
    # Nothing claims to know the script's code or packages.
    assert "sacbench" not in metadata and "versions" not in metadata


def test_a_failing_command_leaves_no_completion_record_and_exits_non_zero(
    tmp_path: Path, script: Path
):
    run_dir = tmp_path / "run"
    done = wrapper(run_dir, script, env={"FAKE_CLEANRL_FAIL_AT_STEP": "700"})
    assert done.returncode == 1
    assert "exit code 1; no complete.json written" in done.stderr
    assert not (run_dir / "complete.json").exists()
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["exit_status"] == "error: exit code 1" and "completion" not in metadata
    assert read_run_scalars(run_dir)["step"].max() < 700  # its partial output stays


def test_exiting_0_without_event_files_is_not_a_finished_run(tmp_path: Path):
    quiet = tmp_path / "quiet.py"
    quiet.write_text("import sys\nprint('parsed', sys.argv[1:])\n")
    done = wrapper(tmp_path / "run", quiet)
    assert done.returncode == 3, done.stderr
    assert "no TensorBoard event files" in done.stderr
    assert not (tmp_path / "run" / "complete.json").exists()


def test_a_program_that_cannot_start_is_named(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "sacbench.run_command", "--run-dir", str(tmp_path / "run"),
         "--env-id", "Pusher-v4", "--seed", "1", "--", str(tmp_path / "no-such-python")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 127
    assert f"cannot start {str(tmp_path / 'no-such-python')!r}" in done.stderr


def test_a_stop_signal_reaches_the_command_and_the_run_stays_unfinished(
    tmp_path: Path, script: Path
):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "sacbench.run_command", "--run-dir", str(run_dir),
         "--env-id", "Pusher-v4", "--seed", "1", "--args-json", '{"total_timesteps": 10000000}',
         "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:  # the script is training
        if line.startswith("global_step="):
            break
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["exit_status"] == "error: stopped by SIGTERM (cannot resume)"
    # The wrapper waited for the script, which the signal ended (Python's default action).
    assert metadata["exit_code"] == -signal.SIGTERM
    assert not (run_dir / "complete.json").exists()


# ---- reruns --------------------------------------------------------------------------------


def test_reruns_keep_every_attempt_count_only_the_last_and_never_rerun_a_finished_run(
    tmp_path: Path, script: Path
):
    run_dir = tmp_path / "run"
    calls = tmp_path / "calls.txt"
    counting = {"FAKE_CLEANRL_INVOCATIONS": str(calls)}
    assert wrapper(run_dir, script, env=counting | {"FAKE_CLEANRL_FAIL_AT_STEP": "700"}).returncode
    failed = tree(run_dir)
    started = json.loads((run_dir / "metadata.json").read_text())["started_unix_time"]
    time.sleep(1.1)  # the next attempt's run name (CleanRL's: unix seconds) differs

    # The rerun moves the failed attempt into attempts/<its start>/, byte for byte.
    done = wrapper(run_dir, script, env=counting)
    assert done.returncode == 0, done.stderr
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    assert tree(run_dir / "attempts" / stamp) == failed
    # Only the new attempt counts: each episode once, up to the last step.
    scalars = read_run_scalars(run_dir)
    returns = scalars[scalars["tag"] == RETURN_TAG]
    assert returns["step"].tolist() == list(range(EPISODE_STEPS - 1, STEPS, EPISODE_STEPS))
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == STEPS - 1

    # A finished run whose completion record was removed (as Snakemake does before it reruns a
    # job) gets it back without running the script.
    record = (run_dir / "complete.json").read_bytes()
    (run_dir / "complete.json").unlink()
    done = wrapper(run_dir, script, env=counting)
    assert done.returncode == 0 and "nothing was run" in done.stdout
    assert (run_dir / "complete.json").read_bytes() == record
    assert len(invocations(calls)) == 2

    # Another command line moves the whole run dir aside, completion record and all.
    finished = tree(run_dir) | {"complete.json": record}
    done = wrapper(run_dir, script, args=ARGS | {"total_timesteps": 800}, env=counting)
    assert done.returncode == 0, done.stderr
    (replaced,) = tmp_path.glob("run.replaced-*")
    assert tree(replaced) == finished
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 799
    assert not (run_dir / "attempts").exists() and len(invocations(calls)) == 3


# ---- the pipeline --------------------------------------------------------------------------

# One sacbench run and one command run of the same budget: 1,600 steps, learning_starts 1,000,
# so the trainer's update runs 600 times and the script logs SPS at steps 1,100-1,500.
PIPELINE_CONFIG = {
    "env_ids": ["Pusher-v4"],
    "seeds": [1],
    "train": {"total_timesteps": 1600, "learning_starts": 1000, "batch_size": 64,
              "buffer_size": 1600, "checkpoint_interval": 1000},
    "variants": {"sac_continuous_action": {}},
}  # fmt: skip
SIDE_BY_SIDE = "snakemake --cores 18 --configfile cleanrl.yaml"  # docs/variants.md's command
COMMAND_RUN = "results/runs/cleanrl/Pusher-v4/1"


def table_row(markdown: str, heading: str, env_id: str) -> dict[str, str]:
    """Header -> cell of `env_id`'s row in the section of `markdown` whose heading starts so."""
    section = markdown.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    (row,) = [line for line in lines if line.startswith(f"| {env_id} |")]
    return dict(
        zip(
            [cell.strip() for cell in lines[0].strip("|").split("|")],
            [cell.strip() for cell in row.strip("|").split("|")],
            strict=True,
        )
    )


def number(cell: str) -> float:
    return float(re.match(r"-?[\d,]+\.?\d*", cell).group().replace(",", ""))


@pytest.mark.slow
def test_cleanrl_style_script_side_by_side_in_every_table_after_a_failed_attempt(
    tmp_path: Path,
):
    workdir = workflow_copy(tmp_path, PIPELINE_CONFIG)
    calls = tmp_path / "calls.txt"
    command = f"{sys.executable} {write_script(tmp_path)}"
    (workdir / "cleanrl.yaml").write_text(
        yaml.safe_dump({"variants": {"cleanrl": {"command": command}}})
    )
    counting = {"FAKE_CLEANRL_INVOCATIONS": str(calls)}

    # The script fails part-way: its job fails, the trainer's finishes (--keep-going).
    first = run_verbatim(
        workdir, f"{SIDE_BY_SIDE} --keep-going",
        extra_env=counting | {"FAKE_CLEANRL_FAIL_AT_STEP": "1200"},
    )  # fmt: skip
    assert first.returncode != 0
    run_dir = workdir / COMMAND_RUN
    assert not (run_dir / "complete.json").exists()
    failed_events = sorted(run_dir.glob("runs/*/events.out.tfevents.*"))
    assert len(failed_events) == 1
    failed_bytes = failed_events[0].read_bytes()
    time.sleep(1.1)  # the next attempt's run name (CleanRL's: unix seconds) differs

    done = run_verbatim(workdir, SIDE_BY_SIDE, extra_env=counting)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Nothing deleted: the failed attempt's events are kept under attempts/.
    (kept,) = run_dir.glob("attempts/*/runs/*/events.out.tfevents.*")
    assert kept.name == failed_events[0].name and kept.read_bytes() == failed_bytes
    # No double counting: the extracted run holds each episode of the last attempt once.
    extracted = pd.read_csv(workdir / "results/extracted/cleanrl/Pusher-v4/1.csv")
    returns = extracted[extracted["tag"] == RETURN_TAG]
    assert returns["step"].tolist() == list(range(EPISODE_STEPS - 1, 1600, EPISODE_STEPS))
    assert set(LOSS_TAGS) | {SPS_TAG} <= set(extracted["tag"])
    summary = json.loads((workdir / "results/extracted/cleanrl/Pusher-v4/1.json").read_text())
    assert summary["extraction"]["event_files"] == [
        str(path.relative_to(run_dir)) for path in run_dir.glob("runs/*/events.out.tfevents.*")
    ]
    assert_both_variants_in_the_tables(workdir)

    # Up to date afterwards; a removed completion record comes back without running the script.
    assert "Nothing to be done" in run_verbatim(workdir, f"{SIDE_BY_SIDE} -n").stdout
    (run_dir / "complete.json").unlink()
    # (a target after --configfile would be read as a config file)
    restored = run_verbatim(
        workdir, SIDE_BY_SIDE.replace(" --", f" {COMMAND_RUN}/complete.json --", 1)
    )
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert (run_dir / "complete.json").exists() and len(invocations(calls)) == 2


def assert_both_variants_in_the_tables(workdir: Path) -> None:
    """sac.md, sac_runtimes.md and sac_aggregate.md have a number in both variants' cells; the
    runtimes fall back to the script's wall times, with their footnotes."""
    results = workdir / "results"
    returns_md = (results / "sac.md").read_text()
    returns = table_row(returns_md, "Training return", "Pusher-v4")
    # The script's 32 episodes return 1 + step / 100 at steps 49, 99, ..., 1599: mean 9.24;
    # over one seed, the value alone (no std, and no intervals section).
    assert returns["`cleanrl`"].split(" [")[0] == "9.24"
    assert number(returns["`sac_continuous_action`"]) < 0
    assert "## 95% confidence intervals" not in returns_md
    runtimes = (results / "sac_runtimes.md").read_text()
    for heading in ("CleanRL SPS", "Steady training SPS", "Wall-clock time",
                    "openrlbenchmark-compatible", "Projected minutes"):  # fmt: skip
        row = table_row(runtimes, heading, "Pusher-v4")
        for variant in ("`sac_continuous_action`", "`cleanrl`"):
            assert number(row[variant]) > 0, (heading, row)
    steady = table_row(runtimes, "Steady training SPS", "Pusher-v4")["`cleanrl`"]
    assert re.search(r"\[\d+\]$", steady), steady
    assert "No charts/steady_SPS in this run's events" in runtimes
    assert "`sac_continuous_action`: sacbench's trainer" in runtimes
    assert f"`cleanrl`: `{sys.executable} " in runtimes
    aggregate = (results / "sac_aggregate.md").read_text()
    assert (
        "| `cleanrl` | 1 | 1 |" in aggregate and "| `sac_continuous_action` | 1 | 1 |" in aggregate
    )
    for name, kind in (("sac", "return"), ("sac-time", "time"), ("sac-sps", "steady_sps")):
        svg = (results / "plots" / f"{name}.svg").read_text()
        assert f'id="{kind}:cleanrl"' in svg and f'id="{kind}:sac_continuous_action"' in svg


# ---- the results of such runs ----------------------------------------------------------------


def synthetic_run(points: list[tuple[str, int, float, float]], summary: dict) -> Run:
    """A run whose scalars are (tag, step, wall_time, value) rows, as extraction writes them."""
    scalars = pd.DataFrame(points, columns=["tag", "step", "wall_time", "value"])
    return Run(RunKey("cleanrl", "Pusher-v4", 1), Path("x.csv"), scalars, summary)


def test_runtimes_of_a_run_without_sacbenchs_time_tags_come_from_its_event_wall_times():
    # charts/SPS every 100 steps from step 100, the script started at t = 1000 s: windows of
    # 100 steps taking 1, 1, 2, ..., 2 s; the command ran 20 s up to its last logged step 1,099.
    walls = [1005.0, 1006.0, 1007.0] + [1007.0 + 2 * i for i in range(1, 8)]
    points = [(SPS_TAG, 100 * (i + 1), wall, 20.0) for i, wall in enumerate(walls)]
    summary = {"started_unix_time": 1000.0, "global_step": 1099, "elapsed_seconds": 20.0}
    run = synthetic_run(points, summary)
    assert times_from_wall_clock(run) == (True, True)
    rates = steady_sps_points(run)["value"].tolist()
    assert rates == [20.0, 100.0, 100.0] + [50.0] * 7  # the first keeps its charts/SPS value
    # Steady SPS: the windows that end past the first 10% of the step range (step 190), here
    # all nine: 900 steps in 1 + 1 + 7 x 2 = 16 s.
    assert steady_sps(run) == pytest.approx(900 / 16)
    elapsed = elapsed_points(run)
    assert elapsed["step"].tolist()[-2:] == [1000, 1099]
    assert elapsed["value"].tolist() == [w - 1000.0 for w in walls] + [20.0]
    # Without metadata.json: the start is complete.json's finished_at - elapsed_seconds.
    finished = dt.datetime.fromtimestamp(1020.0, dt.UTC).isoformat()
    no_metadata = synthetic_run(points, {"finished_at": finished, "elapsed_seconds": 20.0})
    assert elapsed_points(no_metadata)["value"].iloc[0] == pytest.approx(5.0)
    with pytest.raises(MetricError, match="records no start time"):
        elapsed_points(synthetic_run(points, {}))


def test_a_command_run_without_metadata_json_is_still_reported(tmp_path: Path, script: Path):
    run_dir = tmp_path / "runs" / "cleanrl" / "Pusher-v4" / "3"
    assert wrapper(run_dir, script).returncode == 0
    (run_dir / "metadata.json").unlink()
    extracted = tmp_path / "extracted"
    assert report_main(["extract", "--run-dir", str(run_dir),
                        "--output", str(extracted / "cleanrl/Pusher-v4/3.csv")]) == 0  # fmt: skip
    selection = ["--extracted-dir", str(extracted), "--variants", "cleanrl",
                 "--env-ids", "Pusher-v4", "--seeds", "3"]  # fmt: skip
    for command in ("runtimes", "returns"):
        md = tmp_path / f"{command}.md"
        args = [command, *selection, "--md", str(md), "--csv", str(md.with_suffix(".csv"))]
        assert report_main(args) == 0
    runtimes = (tmp_path / "runtimes.md").read_text()
    assert "| CPU model | not recorded |" in runtimes
    for heading in ("CleanRL SPS", "Steady training SPS", "Wall-clock time", "Projected"):
        assert number(table_row(runtimes, heading, "Pusher-v4")["`cleanrl`"]) > 0, heading
    returns = table_row((tmp_path / "returns.md").read_text(), "Training return", "Pusher-v4")
    # 20 episodes at steps 49, ..., 999 returning 3 + step / 100: mean 3 + 5.24.
    assert returns["`cleanrl`"].split(" [")[0] == "8.24"


def test_status_shows_a_command_run_as_running_until_it_ends():
    session = {"started_at": "2020-01-01T00:00:00+00:00", "exit_status": "running",
               "external": True}  # fmt: skip
    state, note = classify(complete=False, progress={}, session=session, now=2e9, stale_after=600)
    assert (state, note) == ("running", "external command: no progress reports, see its log")
    ended = session | {"exit_status": "error: stopped by SIGTERM (cannot resume)"}
    state, note = classify(complete=False, progress={}, session=ended, now=2e9, stale_after=600)
    assert state == "failed" and "cannot resume" in note


# ---- CleanRL's own script, where a checkout and an environment for it are at hand --------------

CLEANRL_CHECKOUT = os.environ.get("SACBENCH_CLEANRL_CHECKOUT")
CLEANRL_PYTHON = os.environ.get("SACBENCH_CLEANRL_PYTHON")


@pytest.mark.skipif(
    not (CLEANRL_CHECKOUT and CLEANRL_PYTHON),
    reason="set SACBENCH_CLEANRL_CHECKOUT (a clone of vwxyzjn/cleanrl) and SACBENCH_CLEANRL_PYTHON"
    " (an interpreter with its packages: docs/variants.md, \"Benchmarking CleanRL's own script"
    ' side by side")',
)
def test_cleanrls_own_script_runs_as_a_command_run(tmp_path: Path):
    """The real sac_continuous_action.py through the wrapper: 1,600 steps of Pusher-v4 (100-step
    episodes), the update from step 1,000 on."""
    assert CLEANRL_CHECKOUT and CLEANRL_PYTHON
    script = Path(CLEANRL_CHECKOUT) / "cleanrl" / "sac_continuous_action.py"
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "sacbench.run_command", "--run-dir", str(run_dir),
         "--env-id", "Pusher-v4", "--seed", "1", "--args-json",
         json.dumps({"total_timesteps": 1600, "learning_starts": 1000, "batch_size": 64,
                     "buffer_size": 1600, "cuda": False}),
         "--", "env", f"PYTHONPATH={CLEANRL_CHECKOUT}", CLEANRL_PYTHON, str(script)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 1599
    scalars = read_run_scalars(run_dir)
    returns = scalars[scalars["tag"] == RETURN_TAG]
    assert returns["step"].tolist() == list(range(99, 1600, 100))
    assert set(LOSS_TAGS) <= set(scalars["tag"]) and not scalars[scalars["tag"] == SPS_TAG].empty

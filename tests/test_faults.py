"""Fault injection: one trainer per run dir, every damaged record caught, no report from damaged
data (issue #35).

Each test damages a copy of a real run dir (or of a pipeline's results) the way a user, a full
disk or a second process does, then runs what a user runs next. A run is resumed or completed
only from intact records (repaired from what is intact, or refused with the file named), never
crashes mid-run, never ends complete with history missing, and two processes never write one
run dir. Every test here failed on the code before issue #35.

The run dirs are shared through module fixtures (one finished run, one killed after two
checkpoints) and copied per test; the trainer runs in-process where no kill is needed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sacbench.events import read_run_scalars
from sacbench.training.cli import main as train_main
from tests.synthetic_runs import SyntheticRun, write_extracted
from tests.trainer_runs import process_runs, read_scalars, reproducible, train_in_process
from tests.workflow_copies import run_verbatim, venv_environment, workflow_copy

ENV_ID = "InvertedPendulum-v4"
# 600 steps, checkpoints at 200 and 400, an evaluation of one episode at 500 and at the end.
SETTINGS = {
    "env-id": ENV_ID, "total-timesteps": "600", "learning-starts": "100", "batch-size": "32",
    "buffer-size": "600", "checkpoint-interval": "200", "eval-frequency": "500",
    "eval-episodes": "1",
}  # fmt: skip


def flags(**changed: str) -> list[str]:
    """The trainer's flags for SETTINGS, with `changed` (eval_episodes="0": --eval-episodes 0)."""
    settings = SETTINGS | {name.replace("_", "-"): value for name, value in changed.items()}
    return [word for name, value in settings.items() for word in (f"--{name}", value)]


ARGS = tuple(flags())
LOCK = ".sacbench.lock"
NEWEST_CHUNK = "rows-000000000200-000000000400.npz"
OLDEST_CHUNK = "rows-000000000000-000000000200.npz"


def trainer_process(
    run_dir: Path, *extra: str, env: dict[str, str] | None = None, settings: bool = True
) -> subprocess.Popen[str]:
    """The trainer on `run_dir` with ARGS (unless `settings` is false) and `extra`."""
    command = [sys.executable, "-m", "sacbench.train", "--run-dir", str(run_dir)]
    command += [*(ARGS if settings else ()), *extra]
    environment = dict(os.environ, PYTHONWARNINGS="ignore") | (env or {})
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run, trained without interruption (in this process: no signal reaches it)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    assert train_in_process(run_dir, *ARGS) == 0
    return run_dir


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run killed with SIGKILL after step 500's evaluation: checkpoints at steps 200
    and 400, events logged past the last one."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    process = trainer_process(run_dir, env={"SACBENCH_TEST_KILL_AT": "after-evaluation-500"})
    out, err = process.communicate(timeout=600)
    assert process.returncode == -signal.SIGKILL, out + err
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    destination = tmp_path / "run"
    shutil.copytree(run_dir, destination, symlinks=True)
    return destination


def train_here(run_dir: Path, capsys: pytest.CaptureFixture[str], **changed: str):
    """`python -m sacbench.train --run-dir RUN_DIR` with flags(**changed), in this process:
    (exit status, its standard error)."""
    status = train_main(["--run-dir", str(run_dir), *flags(**changed)])
    return status, capsys.readouterr().err


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file of the run dir by size and modification time (the lock file aside)."""
    return {
        str(path.relative_to(run_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and not path.name.startswith(LOCK)
    }


def recorded_event_size(run_dir: Path) -> int:
    """The size of the first event file that checkpoint/state.pt (step 400) relies on."""
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=False)
    return state["event_files"][0]["size"]


def event_file(run_dir: Path) -> Path:
    return sorted(run_dir.glob("*tfevents*"))[0]


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def cut(path: Path, size: int) -> None:
    os.truncate(path, size)


def damage_file(path: Path, damage: str) -> None:
    """Delete `path`, or garble or truncate it in the middle."""
    if damage == "deleted":
        path.unlink()
    elif damage == "garbled":
        flip_byte(path, path.stat().st_size // 2)
    else:
        cut(path, path.stat().st_size // 2)


def assert_complete_and_identical(run_dir: Path, finished: Path) -> None:
    """Complete, each step logged once, every reproducible scalar equal to the uninterrupted
    run's, and the extraction's reader (which rejects duplicates and damage) agrees."""
    complete = json.loads((run_dir / "complete.json").read_text())
    assert complete["global_step"] == 600
    assert reproducible(read_scalars(run_dir)) == reproducible(read_scalars(finished))
    read_run_scalars(run_dir)
    assert not (run_dir / LOCK).exists(), "the lock outlived its holder"


def sessions(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "metadata.json").read_text())["sessions"]


# ---- 1. one trainer per run dir -----------------------------------------------------------------


def test_two_trainers_started_together_one_trains_and_the_other_is_refused(tmp_path, finished):
    run_dir = tmp_path / "run"
    longer = flags(total_timesteps="2500", checkpoint_interval="0", eval_episodes="0")
    processes = [trainer_process(run_dir, *longer, settings=False) for _ in range(2)]
    results = [(process.pid, *process.communicate(timeout=600)) for process in processes]
    by_status = {process.returncode: (process.pid, err) for process, (_, _, err) in
                 zip(processes, results, strict=True)}  # fmt: skip
    assert sorted(by_status) == [0, 2], results
    winner, refusal = by_status[0][0], by_status[2][1]
    assert f"in use by python -m sacbench.train (pid {winner} on host" in refusal, refusal
    assert "changed nothing" in refusal and "Traceback" not in refusal
    assert len(sessions(run_dir)) == 1 and len(list(run_dir.glob("*tfevents*"))) == 1
    read_run_scalars(run_dir)  # no step logged twice


def test_a_lock_left_by_a_killed_trainer_does_not_block_the_rerun(
    tmp_path, killed, finished, capsys
):
    run_dir = copy_of(killed, tmp_path)
    holder = json.loads((run_dir / LOCK).read_text())  # what SIGKILL left behind
    assert holder["program"] == "python -m sacbench.train" and holder["lock"] == "flock"
    with pytest.raises(ProcessLookupError):
        os.kill(holder["pid"], 0)
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert [session["start_step"] for session in sessions(run_dir)] == [0, 400]
    assert_complete_and_identical(run_dir, finished)


def test_a_held_run_dir_stops_every_other_writer_naming_the_holder(tmp_path, capsys):
    from sacbench.run_lock import RunDirLock

    held = tmp_path / "run"
    with RunDirLock(held, program="a test"):
        status, err = train_here(held, capsys)
        assert status == 2 and f"in use by a test (pid {os.getpid()} on host" in err, err
        assert os.listdir(held) == [LOCK]
        external = subprocess.run(
            [sys.executable, "-m", "sacbench.run_command", "--run-dir", str(held), "--env-id",
             ENV_ID, "--seed", "1", "--", sys.executable, "-c", "print('ran')"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert external.returncode == 4, external.stderr
        assert "in use by a test" in external.stderr and "ran" not in external.stdout
        assert os.listdir(held) == [LOCK]
    assert not held.exists()  # the lock's own folder goes with it


def test_the_first_refusal_names_the_holder_in_process(tmp_path, capsys):
    from sacbench.run_lock import RunDirBusy, RunDirLock

    first = RunDirLock(tmp_path / "run", program="python -m sacbench.train")
    first.acquire()
    with pytest.raises(RunDirBusy, match=rf"pid {os.getpid()} on host .*since "):
        RunDirLock(tmp_path / "run", program="another").acquire()
    first.release()
    with RunDirLock(tmp_path / "run", program="another") as again:
        assert again.held and json.loads(again.path.read_text())["program"] == "another"
    assert not (tmp_path / "run").exists()


def test_without_os_locks_the_record_is_the_lock(tmp_path, monkeypatch):
    """File systems that refuse locks (ENOLCK): a live holder on this host (pid alive, started
    when recorded) or a fresh record of another host's refuses; a dead, reused or stale one is
    taken over."""
    import fcntl

    from sacbench import run_lock

    def no_locks(*_args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    requeued_once = {
        "SLURM_CLUSTER_NAME": "test", "SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "1"
    }  # fmt: skip
    for name, value in requeued_once.items():  # this process: Slurm job 4242, requeued once
        monkeypatch.setenv(name, value)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live = run_lock.holder_record("python -m sacbench.train") | {
            "pid": sleeper.pid,
            "process_start_ticks": run_lock.process_start_ticks(sleeper.pid),
        }
        cases = {
            "live": (live, 0, True),
            "reused pid": (live | {"process_start_ticks": 1}, 0, False),
            "dead": (live | {"pid": 2**22 + 12345}, 0, False),
            "other host, fresh": (live | {"host": "node-elsewhere"}, 0, True),
            "other host, stale": (live | {"host": "node-elsewhere"}, 11 * 60, False),
            "other host, fresh, this job before its requeue": (
                live | {"host": "node-elsewhere", "slurm": job("4242", restart_count=0)},
                0,
                False,
            ),
            "other host, fresh, another job": (
                live | {"host": "node-elsewhere", "slurm": job("4141", restart_count=0)},
                0,
                True,
            ),
        }
        for name, (record, age, refused) in cases.items():
            path = run_dir / LOCK
            path.write_text(json.dumps(record))
            os.utime(path, (time.time() - age, time.time() - age))
            lock = run_lock.RunDirLock(run_dir, program="python -m sacbench.train")
            if refused:
                with pytest.raises(run_lock.RunDirBusy, match=rf"pid {sleeper.pid} on host"):
                    lock.acquire()
                assert json.loads(path.read_text()) == record, name  # left as it was
            else:
                lock.acquire()
                assert lock.mode == "record", name
                assert json.loads(path.read_text())["pid"] == os.getpid(), name
                with pytest.raises(run_lock.RunDirBusy):  # now this process is the live holder
                    run_lock.RunDirLock(run_dir, program="another").acquire()
                lock.release()
                assert not path.exists(), name
    finally:
        sleeper.kill()
        sleeper.wait()


def test_without_os_locks_a_fresh_run_dir_is_taken_and_refused_by_its_record(tmp_path, monkeypatch):
    """A file system that refuses locks (Lustre mounted without `flock`: ENOSYS) and a run dir
    with no lock file yet: the first process takes it in record mode (its flock probe leaves no
    empty file behind for record mode to mistake for a record being written), a second is
    refused naming it, and once it lets go the next one takes it."""
    import fcntl

    from sacbench import run_lock

    def no_locks(*_args):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    run_dir = tmp_path / "run"
    first = run_lock.RunDirLock(run_dir, program="python -m sacbench.train")
    first.acquire()
    assert first.mode == "record"
    assert json.loads((run_dir / LOCK).read_text())["pid"] == os.getpid()
    second = run_lock.RunDirLock(run_dir, program="python -m sacbench.train")
    with pytest.raises(run_lock.RunDirBusy, match=rf"pid {os.getpid()} on host"):
        second.acquire()
    first.release()
    assert not (run_dir / LOCK).exists()
    second.acquire()
    assert second.mode == "record"
    second.release()


def test_node_local_locks_are_recognised_from_the_mount_table():
    from sacbench.run_lock import node_local_locks

    def mount(point: str, fs_type: str, options: str) -> str:
        return f"36 25 0:32 / {point} rw,relatime shared:1 - {fs_type} server:/export {options}"

    table = "\n".join([
        mount("/", "ext4", "rw"),
        mount("/shared", "nfs4", "rw,vers=4.2,local_lock=none"),
        mount("/scratch", "nfs", "rw,vers=3,nolock,local_lock=all"),
        mount("/lustre", "lustre", "rw,localflock"),
        mount("/beegfs", "beegfs", "rw"),
    ])  # fmt: skip
    assert node_local_locks(Path("/shared/results/run"), table) is None
    assert node_local_locks(Path("/home/me/run"), table) is None
    assert "local_lock=all" in node_local_locks(Path("/scratch/results/run"), table)
    assert "localflock" in node_local_locks(Path("/lustre/x"), table)
    assert "BeeGFS" in node_local_locks(Path("/beegfs/x"), table)


def job(job_id: str, *, restart_count: int) -> dict[str, object]:
    """A lock record's Slurm job on the test's cluster."""
    return {"cluster": "test", "job_id": job_id, "restart_count": restart_count}


def live_lock_holder(
    run_dir: Path, *, then: str = "", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A process that locks `run_dir` as the trainer would, runs `then` (Python, with `run_dir`
    bound), and sleeps holding the lock; returned once it holds it."""
    code = (
        "import sys, time; from pathlib import Path; from sacbench.run_lock import RunDirLock; "
        "run_dir = Path(sys.argv[1]); "
        "RunDirLock(run_dir, program='python -m sacbench.train').acquire(); "
        f"{then or 'pass'}; print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_requeued_slurm_job_takes_its_lock_over_from_its_earlier_run(
    tmp_path, killed, finished, capsys, monkeypatch
):
    """A job requeued after a node failure can find its earlier run's lock still held (the dead
    node's NFS lock lingers): the holder, a live process here, recorded the same job with fewer
    restarts, so the requeued run takes over at once. Any other holder still refuses."""
    run_dir = copy_of(killed, tmp_path)
    slurm = {"SLURM_CLUSTER_NAME": "test", "SLURM_JOB_ID": "4242"}
    holder = live_lock_holder(
        run_dir,
        env={key: value for key, value in os.environ.items() if key != "SLURM_RESTART_COUNT"}
        | slurm,
    )
    try:
        for name, value in slurm.items():
            monkeypatch.setenv(name, value)
        for job_id, restart_count in [("4343", "1"), ("4242", "0")]:  # another job; the same run
            monkeypatch.setenv("SLURM_JOB_ID", job_id)
            monkeypatch.setenv("SLURM_RESTART_COUNT", restart_count)
            before = snapshot(run_dir)
            status, err = train_here(run_dir, capsys)
            assert status == 2 and f"pid {holder.pid} on host" in err, err
            assert "Slurm job 4242" in err and snapshot(run_dir) == before
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
        status, err = train_here(run_dir, capsys)
        assert status == 0, err
        assert f"over from python -m sacbench.train (pid {holder.pid} on host" in err, err
        assert "this Slurm job before Slurm requeued it" in err
        assert [session["start_step"] for session in sessions(run_dir)] == [0, 400]
        assert_complete_and_identical(run_dir, finished)
    finally:
        holder.kill()
        holder.wait()


def test_a_flock_whose_holder_on_another_host_went_silent_is_taken_over(tmp_path):
    """A node that died holding an NFS lock: the flock stays held and the holder's record is
    no longer refreshed. Held while the record is younger than the lease; taken over after."""
    from sacbench.run_lock import LEASE_SECONDS, RunDirBusy, RunDirLock

    run_dir = tmp_path / "run"
    then = (
        "import json; path = run_dir / '.sacbench.lock'; record = json.loads(path.read_text()); "
        "path.write_text(json.dumps(record | {'host': 'node-elsewhere'}))"
    )
    holder = live_lock_holder(run_dir, then=then)
    try:
        with pytest.raises(RunDirBusy, match=rf"pid {holder.pid} on host node-elsewhere"):
            RunDirLock(run_dir, program="another").acquire()
        silent_since = time.time() - LEASE_SECONDS - 120
        os.utime(run_dir / LOCK, (silent_since, silent_since))
        lock = RunDirLock(run_dir, program="another")
        lock.acquire()
        assert lock.mode == "flock" and f"pid {holder.pid} on host node-elsewhere" in (
            lock.taken_over_from
        )
        assert "last refreshed 12 minutes ago" in lock.taken_over_from
        assert json.loads((run_dir / LOCK).read_text())["pid"] == os.getpid()
        with pytest.raises(RunDirBusy):  # the new lock holds
            RunDirLock(run_dir, program="a third").acquire()
        lock.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_takeover_puts_back_a_lock_file_that_another_takeover_made_first(tmp_path):
    """Two processes that judge one dead holder's lock at once: the one that comes second finds
    the other's fresh lock file in place of the one it judged, puts it back and tries again,
    so that the two never both hold the run dir."""
    from sacbench.run_lock import RunDirLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / LOCK
    path.write_text("the dead holder's")
    judged = os.stat(path)
    fresh = run_dir / "fresh"
    fresh.write_text("the first taker's")
    os.replace(fresh, path)
    late = RunDirLock(run_dir, program="the second taker")
    late._take_over({"host": "node-elsewhere", "pid": 1}, "presumed dead", judged=judged)
    assert path.read_text() == "the first taker's" and late.taken_over_from is None
    assert [entry.name for entry in run_dir.iterdir()] == [LOCK]


# ---- 1. the pipeline: snakemake killed, unlocked, run again ------------------------------------

PIPELINE_CONFIG = {
    "env_ids": [ENV_ID],
    "seeds": [1],
    "train": {"total_timesteps": 1500, "learning_starts": 500, "batch_size": 32,
              "buffer_size": 1500, "checkpoint_interval": 500, "eval_episodes": 0},
}  # fmt: skip
RUN = f"results/runs/sac_continuous_action/{ENV_ID}/1"


def wait_for(condition, *, timeout: float = 300.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def running_trainer_pid(run_dir: Path) -> int | None:
    try:
        progress = json.loads((run_dir / "progress.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return progress["pid"] if progress.get("state") == "running" else None


def test_snakemake_killed_unlocked_and_rerun_never_starts_a_second_trainer(tmp_path):
    workdir = workflow_copy(tmp_path, PIPELINE_CONFIG)
    run_dir = workdir / RUN
    # The returns table is the target: it needs the run, and no plot (which nothing here checks).
    first = subprocess.Popen(
        ["snakemake", "--cores", "1", "results/sac.md"], cwd=workdir, env=venv_environment(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    trainer = None
    try:
        wait_for(lambda: running_trainer_pid(run_dir) is not None, what="the first trainer")
        trainer = running_trainer_pid(run_dir)
        os.kill(trainer, signal.SIGSTOP)  # it keeps its run dir, and will go on later
        first.kill()  # kill -9 snakemake: its train job lives on
        first.wait()
        assert run_verbatim(workdir, "snakemake --unlock").returncode == 0
        second = run_verbatim(workdir, "snakemake --cores 1 results/sac.md")
        log = (workdir / f"results/logs/train/sac_continuous_action/{ENV_ID}/1.log").read_text()
        assert second.returncode != 0, second.stderr[-3000:]
        assert f"in use by python -m sacbench.train (pid {trainer} on host" in log, log
        assert "Traceback" not in log
        os.kill(trainer, signal.SIGCONT)
        wait_for(lambda: not process_runs(trainer), what="the first trainer to end")
        trainer = None
        third = run_verbatim(workdir, "snakemake --cores 1 results/sac.md")
        assert third.returncode == 0, third.stderr[-3000:]
    finally:
        if trainer is not None:
            os.kill(trainer, signal.SIGKILL)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert [s["start_step"] for s in sessions(run_dir)] == [0]  # one trainer, one session
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 1500
    read_run_scalars(run_dir)  # each step once
    assert (workdir / "results/sac.md").is_file()


# ---- 2. every record a resume relies on ---------------------------------------------------------


def test_a_deleted_event_file_is_refused_before_training(tmp_path, killed, capsys):
    run_dir = copy_of(killed, tmp_path)
    lost = event_file(run_dir)
    lost.unlink()
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and f"event file {lost}" in err and "is missing" in err, err
    assert snapshot(run_dir) == before
    # With no periodic checkpoints to reach, it is not completed with the history missing.
    status, err = train_here(run_dir, capsys, checkpoint_interval="0")
    assert status == 2 and not (run_dir / "complete.json").exists()


@pytest.mark.parametrize("damage", ["garbled", "truncated"])
def test_an_event_file_damaged_after_the_first_checkpoint_resumes_from_it(
    tmp_path, killed, finished, capsys, damage
):
    run_dir = copy_of(killed, tmp_path)
    position = recorded_event_size(run_dir) - 20  # inside the last record before step 400
    if damage == "garbled":
        flip_byte(event_file(run_dir), position)
    else:
        cut(event_file(run_dir), position)
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert "resuming from the checkpoint before it, at step 200" in err
    assert [session["start_step"] for session in sessions(run_dir)] == [0, 200]
    assert list((run_dir / "checkpoint").glob("state.pt.damaged-*"))  # kept, never deleted
    assert_complete_and_identical(run_dir, finished)


def test_an_event_file_garbled_where_every_checkpoint_relies_on_it_is_refused(
    tmp_path, killed, capsys
):
    run_dir = copy_of(killed, tmp_path)
    flip_byte(event_file(run_dir), 100)
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and str(event_file(run_dir)) in err and "corrupt record" in err, err
    assert "state.prev.pt" in err  # neither checkpoint can be resumed from
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("damage", ["deleted", "garbled", "truncated"])
def test_a_finished_run_with_damaged_history_is_never_marked_complete(
    tmp_path, finished, capsys, damage
):
    run_dir = copy_of(finished, tmp_path)
    (run_dir / "complete.json").unlink()  # as Snakemake does before it reruns the job
    events = event_file(run_dir)
    if damage == "deleted":
        events.unlink()
    elif damage == "garbled":
        flip_byte(events, events.stat().st_size // 2)
    else:
        cut(events, events.stat().st_size - 30)
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and str(events) in err and "history is damaged" in err, err
    assert not (run_dir / "complete.json").exists() and snapshot(run_dir) == before


@pytest.mark.parametrize("asked", [{"total_timesteps": "3000"}, {"gamma": "0.5"}])
@pytest.mark.parametrize("which", ["finished", "killed"])
def test_a_run_without_metadata_refuses_other_settings_finished_or_not(
    tmp_path, request, capsys, which, asked
):
    run_dir = copy_of(request.getfixturevalue(which), tmp_path)
    (run_dir / "metadata.json").unlink()
    (run_dir / "complete.json").unlink(missing_ok=True)
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys, **asked)
    (name,) = asked
    assert status == 2 and f"{name}: recorded" in err, err
    assert snapshot(run_dir) == before


def test_a_run_without_metadata_and_with_damaged_checkpoints_is_refused_naming_them(
    tmp_path, killed, capsys
):
    run_dir = copy_of(killed, tmp_path)
    (run_dir / "metadata.json").unlink()
    for name in ("state.pt", "state.prev.pt"):
        cut(run_dir / "checkpoint" / name, 100)
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2, err
    assert "metadata.json is missing, and no usable checkpoint records the run's settings" in err
    assert "state.pt: " in err and "state.prev.pt: " in err and "did not make" not in err, err
    assert snapshot(run_dir) == before


def test_a_finished_run_without_metadata_is_repaired_from_its_final_state(
    tmp_path, finished, capsys
):
    run_dir = copy_of(finished, tmp_path)
    (run_dir / "metadata.json").unlink()
    events = {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")}
    completed_at = (run_dir / "complete.json").stat().st_mtime_ns
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    # Rewritten after the repair, so that Snakemake extracts the run again.
    assert (run_dir / "complete.json").stat().st_mtime_ns > completed_at
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["args"]["total_timesteps"] == 600 and metadata["exit_status"] == "completed"
    assert "metadata.json is missing" in metadata["recovered"]["because"]
    assert {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")} == events


@pytest.mark.parametrize("damage", ["a JSON list", "truncated"])
def test_damaged_metadata_is_rebuilt_from_the_checkpoint_and_the_run_resumes(
    tmp_path, killed, finished, capsys, damage
):
    run_dir = copy_of(killed, tmp_path)
    path = run_dir / "metadata.json"
    text = path.read_text()
    path.write_text(json.dumps([json.loads(text)]) if damage == "a JSON list" else text[:200])
    status, err = train_here(run_dir, capsys)
    assert status == 0 and "Traceback" not in err, err
    assert "rebuilt" in err and list(run_dir.glob("metadata.json.damaged-*"))
    assert [session["start_step"] for session in sessions(run_dir)] == [400]
    assert_complete_and_identical(run_dir, finished)


@pytest.mark.parametrize("damage", ["deleted", "garbled", "truncated"])
def test_a_damaged_newest_checkpoint_resumes_from_the_one_before(
    tmp_path, killed, finished, capsys, damage
):
    run_dir = copy_of(killed, tmp_path)
    state = run_dir / "checkpoint" / "state.pt"
    damage_file(state, damage)
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert [session["start_step"] for session in sessions(run_dir)] == [0, 200]
    assert_complete_and_identical(run_dir, finished)


@pytest.mark.parametrize("damage", ["deleted", "garbled", "truncated"])
def test_a_damaged_newest_buffer_chunk_resumes_from_the_checkpoint_before(
    tmp_path, killed, finished, capsys, damage
):
    run_dir = copy_of(killed, tmp_path)
    chunk = run_dir / "checkpoint" / NEWEST_CHUNK
    damage_file(chunk, damage)
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert str(chunk) in err  # the warning names it
    assert [session["start_step"] for session in sessions(run_dir)] == [0, 200]
    assert_complete_and_identical(run_dir, finished)


def test_a_chunk_every_checkpoint_needs_is_refused_naming_it(tmp_path, killed, capsys):
    run_dir = copy_of(killed, tmp_path)
    chunk = run_dir / "checkpoint" / OLDEST_CHUNK
    cut(chunk, chunk.stat().st_size // 2)
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and str(chunk) in err and "no checkpoint" in err, err
    assert "state.prev.pt" in err or err.count(str(chunk)) >= 2
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_a_finished_run_whose_final_state_is_lost_is_completed_from_its_records(
    tmp_path, finished, capsys, damage
):
    run_dir = copy_of(finished, tmp_path)
    (run_dir / "complete.json").unlink()
    state = run_dir / "checkpoint" / "state.pt"
    if damage == "deleted":
        state.unlink()
    else:
        flip_byte(state, state.stat().st_size // 2)
    events = {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")}
    # Asked for the saved actor too, which only an intact final state holds.
    status = train_main(["--run-dir", str(run_dir), *ARGS, "--save-model"])
    err = capsys.readouterr().err
    assert status == 0, err
    if damage == "garbled":
        assert "fails its checksum" in err and "rebuilt from metadata.json and the events" in err
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 600
    assert {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")} == events
    assert len(sessions(run_dir)) == 1  # nothing was trained again
    assert not list(run_dir.glob("*.cleanrl_model"))  # never from a damaged state


@pytest.mark.parametrize("damage", ["garbled", "truncated"])
def test_a_damaged_completion_record_is_rewritten_from_the_final_state(
    tmp_path, finished, capsys, damage
):
    run_dir = copy_of(finished, tmp_path)
    path = run_dir / "complete.json"
    record = json.loads(path.read_text())
    path.write_text("{not json" if damage == "garbled" else path.read_text()[:20])
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert json.loads(path.read_text()) == record
    assert list(run_dir.glob("complete.json.damaged-*"))


def test_a_completion_record_of_an_unfinished_run_is_refused(tmp_path, killed, finished, capsys):
    run_dir = copy_of(killed, tmp_path)
    shutil.copy(finished / "complete.json", run_dir / "complete.json")
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and str(run_dir / "complete.json") in err, err
    assert snapshot(run_dir) == before


def test_a_progress_record_that_is_a_folder_is_refused_with_a_message(tmp_path, killed, capsys):
    run_dir = copy_of(killed, tmp_path)
    (run_dir / "progress.json").unlink()
    (run_dir / "progress.json").mkdir()
    before = snapshot(run_dir)
    status, err = train_here(run_dir, capsys)
    assert status == 2 and str(run_dir / "progress.json") in err and "Traceback" not in err
    assert snapshot(run_dir) == before


def test_temporary_files_of_an_interrupted_write_are_removed_at_the_next_start(
    tmp_path, killed, finished, capsys
):
    run_dir = copy_of(killed, tmp_path)
    strays = [
        run_dir / "checkpoint" / ".state.pt.k2x9_q1z.tmp",
        run_dir / "checkpoint" / f".{NEWEST_CHUNK}.abcdefgh.tmp",
        run_dir / ".metadata.json.0a1b2c3d.tmp",
    ]
    for stray in strays:
        stray.write_bytes(b"half a write")
    mine = run_dir / ".notes.tmp"  # not one of sacbench's: left alone
    mine.write_text("keep")
    status, err = train_here(run_dir, capsys)
    assert status == 0, err
    assert not any(stray.exists() for stray in strays) and mine.read_text() == "keep"
    assert_complete_and_identical(run_dir, finished)


# ---- 4. errors, not tracebacks ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q_lr", "policy_lr", "alpha"])
def test_a_non_finite_float_argument_is_refused(tmp_path, capsys, name):
    status, err = train_here(tmp_path / "run", capsys, **{name: "inf"})
    flag = "--" + name.replace("_", "-")
    assert status == 2 and f"{flag} must be a finite number, got inf" in err, err
    assert not (tmp_path / "run").exists()


def test_an_empty_run_dir_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status = train_main(["--run-dir", "", *ARGS])
    err = capsys.readouterr().err
    assert status == 2 and "--run-dir must name a folder, got ''" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_holding_someone_elses_event_file_is_refused_and_left_alone(tmp_path, capsys):
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    events = foreign / "events.out.tfevents.1700000000.elsewhere.1.0"
    events.write_bytes(b"someone else's events")
    status, err = train_here(foreign, capsys)
    assert status == 2 and events.name in err and "did not make" in err, err
    assert events.read_bytes() == b"someone else's events"
    assert sorted(path.name for path in foreign.iterdir()) == [events.name]


def test_a_run_dir_that_is_a_file_is_refused_with_a_message(tmp_path, capsys):
    path = tmp_path / "afile"
    path.write_text("mine")
    status, err = train_here(path, capsys)
    assert status == 2 and f"run dir {path} is a file, not a folder" in err, err
    assert path.read_text() == "mine"


def mount_tmpfs(point: Path, options: str) -> None:
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


def test_a_read_only_file_system_is_refused_with_a_message(tmp_path, capsys):
    mount_tmpfs(tmp_path / "ro", "size=1m,ro")
    try:
        status, err = train_here(tmp_path / "ro" / "run", capsys)
    finally:
        subprocess.run(["umount", str(tmp_path / "ro")], check=True)
    assert status == 2 and "read-only file system" in err and "Traceback" not in err, err


def test_a_full_disk_names_the_checkpoint_and_keeps_the_last_good_one(tmp_path, finished, capsys):
    """The first checkpoint (about 3 MB) fits the 5 MB device; the second's temporary file does
    not. Once the run dir has room again, the run resumes from the first checkpoint."""
    mount_tmpfs(tmp_path / "small", "size=5m")
    try:
        status, err = train_here(tmp_path / "small" / "run", capsys)
        kept = torch.load(tmp_path / "small/run/checkpoint/state.pt", weights_only=False)
        shutil.copytree(tmp_path / "small" / "run", tmp_path / "run")
    finally:
        subprocess.run(["umount", str(tmp_path / "small")], check=True)
    assert status == 2, err
    assert "checkpoint/state.pt" in err and "is full (no space left on device)" in err, err
    assert "enforce fail" not in err and kept["global_step"] == 200
    status, err = train_here(tmp_path / "run", capsys)
    assert status == 0, err
    assert_complete_and_identical(tmp_path / "run", finished)


def test_a_config_with_non_integer_seeds_or_a_file_for_results_dir_is_refused(
    tmp_path, monkeypatch
):
    from sacbench.pipeline.config import ConfigError, load_schema, validated_config

    monkeypatch.chdir(tmp_path)
    Path("taken").write_text("a file")
    schema = load_schema(Path(__file__).parents[1] / "workflow/schemas/config.schema.yaml")
    with pytest.raises(ConfigError) as refused:
        validated_config({"env_ids": [ENV_ID], "seeds": [1.0], "results_dir": "taken/results"},
                         schema=schema)  # fmt: skip
    problems = "\n".join(refused.value.problems)
    assert "seeds[0]: 1.0 is not of type 'integer'" in problems
    assert "results_dir: 'taken/results' cannot be a folder: 'taken' is a file" in problems


# ---- 3. reports refuse damaged inputs -----------------------------------------------------------


@pytest.fixture
def extracted(tmp_path: Path) -> Path:
    for seed in (1, 2):
        write_extracted(tmp_path / "extracted", tmp_path / "runs", SyntheticRun(seed=seed),
                        variant="fast")  # fmt: skip
    return tmp_path / "extracted"


def report(extracted: Path, command: str, *extra: str) -> tuple[int, str]:
    from sacbench.results.cli import main as report_main

    out = extracted.parent / "out"
    status = report_main([
        command, "--extracted-dir", str(extracted), "--variants", "fast", "--env-ids",
        "Hopper-v4", "--seeds", "1", "2", "--md", str(out / "t.md"), "--csv", str(out / "t.csv"),
        *extra,
    ])  # fmt: skip
    return status, (out / "t.md").read_text() if status == 0 else ""


@pytest.mark.parametrize("damage", ["truncated", "edited", "summary edited"])
@pytest.mark.parametrize("command", ["runtimes", "returns", "aggregate"])
def test_every_report_refuses_a_damaged_extracted_file(extracted, capsys, damage, command):
    table = extracted / "fast" / "Hopper-v4" / "1.csv"
    lines = table.read_text().splitlines(keepends=True)
    if damage == "truncated":  # at a line boundary: it still parses
        table.write_text("".join(lines[: len(lines) // 2]))
    elif damage == "edited":
        lines[5] = lines[5].rsplit(",", 1)[0] + ",12345.0\n"
        table.write_text("".join(lines))
    else:
        summary = table.with_suffix(".json")
        record = json.loads(summary.read_text())
        record["elapsed_seconds"] *= 2
        summary.write_text(json.dumps(record))
    for extra in ((), ("--allow-missing",)):
        status, _ = report(extracted, command, *extra)
        err = capsys.readouterr().err
        named = table.name if damage != "summary edited" else table.with_suffix(".json").name
        assert status == 1 and named in err and "extract the run again" in err, err


def test_a_cell_says_when_its_runs_differ_in_length(tmp_path):
    for seed, steps in ((1, 2000), (2, 3000)):
        write_extracted(tmp_path / "extracted", tmp_path / "runs",
                        SyntheticRun(seed=seed, total_timesteps=steps), variant="fast")  # fmt: skip
    for command in ("runtimes", "returns"):
        status, markdown = report(tmp_path / "extracted", command)
        assert status == 0
        assert "fast/Hopper-v4: runs of different lengths mixed (seed 1 2,000, seed 2 3,000 " in (
            markdown
        ), markdown
        row = next(line for line in markdown.splitlines() if line.startswith("| Hopper-v4"))
        assert "[" in row  # the mark sits in the cell


def test_an_extraction_of_an_older_sacbench_is_refused_and_made_again_by_the_pipeline(tmp_path):
    """Extracted by a sacbench before digests (its extract rule without the format param, its
    summary without the records): the tables refuse it, and the pipeline extracts it again."""
    shorter = PIPELINE_CONFIG["train"] | {"total_timesteps": 600, "learning_starts": 100}
    workdir = workflow_copy(tmp_path, PIPELINE_CONFIG | {"train": shorter})
    (workdir / "workflow").unlink()
    shutil.copytree(Path(__file__).parents[1] / "workflow", workdir / "workflow")
    rule = workdir / "workflow/rules/extract.smk"
    rule.write_text(
        "".join(line for line in rule.read_text().splitlines(keepends=True)
                if "extraction_format" not in line)
    )  # fmt: skip
    # The runtimes table is the cheapest target that reads the extraction.
    assert run_verbatim(workdir, "snakemake --cores 1 results/sac_runtimes.md").returncode == 0
    summary_path = workdir / f"results/extracted/sac_continuous_action/{ENV_ID}/1.json"
    summary = json.loads(summary_path.read_text())
    for key in ("format", "rows_per_tag", "csv_sha256", "summary_sha256"):
        summary["extraction"].pop(key, None)
    summary_path.write_text(json.dumps(summary))
    refused = run_verbatim(workdir, "snakemake --cores 1 results/sac_runtimes.md")
    assert refused.returncode != 0
    log = (workdir / "results/logs/tables/sac_runtimes.log").read_text()
    assert "1.json records no digest of 1.csv" in log and "extract the run again" in log, log
    shutil.rmtree(workdir / "workflow")
    (workdir / "workflow").symlink_to(Path(__file__).parents[1] / "workflow")  # the upgrade
    again = run_verbatim(workdir, "snakemake --cores 1 results/sac_runtimes.md")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "csv_sha256" in json.loads(summary_path.read_text())["extraction"]

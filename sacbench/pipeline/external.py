"""One pipeline run of an external CleanRL-style script: `python -m sacbench.run_command`.

A command variant in config.yaml (`variants: NAME: {command: ...}`) trains with its own script
instead of sacbench's trainer. For each run the pipeline calls

    python -m sacbench.run_command --run-dir DIR --env-id ENV --seed SEED --threads N \\
        --args-json '{"total_timesteps": 1000000, ...}' -- COMMAND [WORD ...]

which runs `COMMAND [WORD ...] --env-id ENV --seed SEED --total-timesteps 1000000 ...` with DIR
as its working directory and this process's output as its own (the job's log), and records the
run as docs/contracts.md ("Runs of an external command") describes:

- metadata.json, before the command starts and again when it ends: the command line, the flags
  by name, the host, times and the exit status. Nothing in it claims to know the script's code
  or packages: sacbench's version is recorded only as the version of this wrapper.
- complete.json, only when the command exits 0 without having been stopped: the last step that
  its event files log (found by sacbench.events.run_event_files: CleanRL writes
  runs/{run_name}/), its wall-clock seconds and the time it finished.

Such a run cannot resume. What a rerun does with what the run dir holds (nothing is deleted):
- a finished attempt of the same command line: complete.json is restored from metadata.json,
  and nothing runs;
- an unfinished attempt of the same command line (failed, stopped, killed, or unrecorded): its
  files move into attempts/<its UTC start>/ inside the run dir, which no reader of the run looks
  into, and the command runs afresh;
- a run of another command line, or of sacbench's trainer: the run dir moves aside to
  <dir>.replaced-<UTC now>, as the trainer's --overwrite does, and the command runs afresh.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sacbench
from sacbench.atomic import write_json_atomically
from sacbench.events import PREVIOUS_ATTEMPTS_DIR, EventLogError, read_run_scalars
from sacbench.provenance import cpu_model, utc_now
from sacbench.run_lock import LOCK_FILE_NAME, RunDirLock, RunDirLockError
from sacbench.training.run_records import remove_stray_temporaries

METADATA_FILE = "metadata.json"
COMPLETE_FILE = "complete.json"
# The flags the pipeline gives every script; a variant's args may not set them.
PIPELINE_FLAGS = ("env_id", "seed")
# Signals that stop a run: passed on to the command; the run then counts as unfinished.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
EXIT_BAD_ARGUMENTS = 2
EXIT_NO_EVENTS = 3
EXIT_NOT_STARTED = 127
EXIT_RUN_DIR_BUSY = 4  # another process holds the run dir, or it cannot be locked
PROGRAM = "python -m sacbench.run_command"
# Thread counts a torch (or numpy) script reads at start-up; set from --threads, so a command
# variant's runs use the threads the pipeline gave the job, as the trainer's do.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PR_SET_PDEATHSIG = 1
# What stays where it is when an unfinished attempt's files move into attempts/.
KEPT_IN_PLACE = frozenset({PREVIOUS_ATTEMPTS_DIR, LOCK_FILE_NAME})


class CommandRunError(ValueError):
    """An argument or a run dir this wrapper cannot use; the message names it."""


def script_flags(args: Mapping[str, Any]) -> list[str]:
    """Flags as a CleanRL (tyro) script parses them: `name: value` as --name-with-dashes value,
    booleans as --name / --no-name."""
    flags: list[str] = []
    for name, value in args.items():
        if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
            raise CommandRunError(f"flag name {name!r} is not a lower-case Python identifier")
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        elif isinstance(value, str | int | float):
            flags += [f"--{flag}", str(value)]
        else:
            raise CommandRunError(
                f"flag {name!r}: expected a string, number or boolean, got {value!r}"
            )
    return flags


@dataclass(frozen=True)
class CommandRun:
    """What defines one run of an external command: its command line."""

    command: tuple[str, ...]
    env_id: str
    seed: int
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.command or not all(isinstance(word, str) and word for word in self.command):
            raise CommandRunError(f"the command must name a program, got {self.command!r}")
        if not isinstance(self.env_id, str) or not self.env_id:
            raise CommandRunError(f"--env-id must be a Gymnasium env id, got {self.env_id!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise CommandRunError(f"--seed must be a non-negative integer, got {self.seed!r}")
        taken = sorted(set(self.args) & set(PIPELINE_FLAGS))
        if taken:
            raise CommandRunError(f"--args-json may not set {', '.join(taken)}: the pipeline does")
        script_flags(self.args)  # names and values must make flags

    @property
    def argv(self) -> list[str]:
        return [
            *self.command,
            *("--env-id", self.env_id, "--seed", str(self.seed)),
            *script_flags(self.args),
        ]


# ---- the run dir before an attempt ---------------------------------------------------------


def _read_record(run_dir: Path) -> dict[str, Any] | None:
    """metadata.json's object; None when it is missing or unusable (an unrecorded attempt)."""
    try:
        record = json.loads((run_dir / METADATA_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _recorded_argv(record: Mapping[str, Any]) -> Any:
    command = record.get("command")
    return command.get("argv") if isinstance(command, dict) else None


def _utc_stamp(unix_time: float | None = None) -> str:
    moment = (
        dt.datetime.now(dt.UTC)
        if unix_time is None
        else dt.datetime.fromtimestamp(unix_time, dt.UTC)
    )
    return moment.strftime("%Y%m%dT%H%M%SZ")


def _finished_record(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if record is None or record.get("exit_status") != "completed":
        return None
    completion = record.get("completion")
    return dict(completion) if isinstance(completion, dict) else None


def _move_run_dir_aside(run_dir: Path, record: Mapping[str, Any]) -> Path:
    """A run dir of another command line or of the trainer: moved whole to <dir>.replaced-<UTC>,
    with its complete.json put back when Snakemake removed it, so it still says it finished."""
    completion = _finished_record(record)
    if completion is not None and not (run_dir / COMPLETE_FILE).exists():
        write_json_atomically(run_dir / COMPLETE_FILE, completion)
    destination = run_dir.with_name(f"{run_dir.name}.replaced-{_utc_stamp()}")
    run_dir.rename(destination)
    print(f"moved {run_dir}, a run of another command line, to {destination}", flush=True)
    return destination


def _move_into_attempts(run_dir: Path, record: Mapping[str, Any] | None) -> None:
    """An unfinished attempt: its files move into attempts/<its UTC start>/. metadata.json moves
    last, so that a move cut short by a kill is completed into the same folder next time."""
    started = record.get("started_unix_time") if record else None
    if isinstance(started, int | float) and not isinstance(started, bool):
        name = _utc_stamp(float(started))
    else:
        name = f"unrecorded-{_utc_stamp()}"
    destination = run_dir / PREVIOUS_ATTEMPTS_DIR / name
    destination.mkdir(parents=True, exist_ok=True)
    entries = sorted(
        (path for path in run_dir.iterdir() if path.name not in KEPT_IN_PLACE),
        key=lambda path: path.name == METADATA_FILE,
    )
    for path in entries:
        target = destination / path.name
        suffix = 1
        while target.exists():
            target, suffix = destination / f"{path.name}.{suffix}", suffix + 1
        path.rename(target)
    print(f"moved the unfinished attempt in {run_dir} to {destination}", flush=True)


def prepare_run_dir(
    run_dir: Path, run: CommandRun, *, lock: RunDirLock | None = None
) -> dict[str, Any] | None:
    """Make `run_dir` ready for a fresh attempt of `run`; or, when it holds a finished attempt
    of the same command line, return that attempt's completion record (nothing to run).
    `lock`: this process's lock of the run dir, which follows it when it is moved aside."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not any(path.name not in KEPT_IN_PLACE for path in run_dir.iterdir()):
        return None
    record = _read_record(run_dir)
    if record is not None and _recorded_argv(record) != run.argv:
        destination = _move_run_dir_aside(run_dir, record)
        run_dir.mkdir()
        if lock is not None:
            lock.moved(destination)
        return None
    finished = _finished_record(record)
    if finished is not None:
        return finished
    _move_into_attempts(run_dir, record)
    return None


# ---- running the command -------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How the command ended."""

    returncode: int | None
    """the command's exit status (negative: killed by that signal); None if it never started"""
    stop_signal: int | None
    """the first stop signal this wrapper received and passed on, if any"""
    elapsed_seconds: float
    start_error: str | None = None


def _die_with_parent() -> None:
    """In the child, before it becomes the command: have the kernel send it SIGTERM when this
    wrapper dies, even by SIGKILL, so that a killed job leaves no training running (Linux's
    prctl; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def run_command(argv: Sequence[str], *, cwd: Path, environment: Mapping[str, str]) -> Outcome:
    """Run `argv` in `cwd`, its output going where this process's goes, passing stop signals on."""
    child: subprocess.Popen[bytes] | None = None
    received: list[int] = []

    def pass_on(signum: int, _frame: Any) -> None:
        received.append(signum)
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous: dict[int, Callable[..., Any] | int | None] = {
        signum: signal.signal(signum, pass_on) for signum in STOP_SIGNALS
    }
    started = time.monotonic()
    try:
        try:
            child = subprocess.Popen(
                list(argv), cwd=cwd, env=dict(environment), preexec_fn=_die_with_parent
            )
        except OSError as error:
            return Outcome(None, None, 0.0, f"cannot start {argv[0]!r}: {error.strerror}")
        if received:  # a stop signal came while the command was being started
            child.send_signal(received[0])
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return Outcome(returncode, received[0] if received else None, time.monotonic() - started)


# ---- the records ---------------------------------------------------------------------------


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def completion_record(run_dir: Path, *, elapsed_seconds: float) -> dict[str, Any]:
    """complete.json of a command that exited 0: its last logged step; EventLogError when its
    event files are missing, damaged or hold no scalar."""
    scalars = read_run_scalars(run_dir)
    if scalars.empty:
        raise EventLogError(f"the event files under {run_dir} hold no scalar")
    return {
        "global_step": int(scalars["step"].max()),
        "elapsed_seconds": elapsed_seconds,
        "finished_at": utc_now(),
    }


def conclude(run_dir: Path, outcome: Outcome) -> tuple[str, dict[str, Any] | None, int]:
    """(exit status text, completion record or None, this wrapper's exit code)."""
    if outcome.start_error is not None:
        return f"error: {outcome.start_error}", None, EXIT_NOT_STARTED
    assert outcome.returncode is not None
    if outcome.stop_signal is not None:
        name = _signal_name(outcome.stop_signal)
        return f"error: stopped by {name} (cannot resume)", None, 128 + outcome.stop_signal
    if outcome.returncode < 0:
        name = _signal_name(-outcome.returncode)
        return f"error: killed by {name}", None, 128 - outcome.returncode
    if outcome.returncode > 0:
        return f"error: exit code {outcome.returncode}", None, outcome.returncode
    try:
        record = completion_record(run_dir, elapsed_seconds=outcome.elapsed_seconds)
    except EventLogError as error:
        return f"error: exited 0, but {error}", None, EXIT_NO_EVENTS
    return "completed", record, 0


def start_record(run: CommandRun, *, run_dir: Path, environment: Mapping[str, str]) -> dict:
    """metadata.json as written before the command starts."""
    started_at = utc_now()
    return {
        "args": {"env_id": run.env_id, "seed": run.seed, **run.args},
        "command": {
            "words": list(run.command),
            "argv": run.argv,
            "cwd": str(run_dir.resolve()),
            "environment": dict(environment),
        },
        "runner": {"program": PROGRAM, "version": sacbench.__version__},
        "host": {
            "hostname": socket.gethostname(),
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        },
        "sessions": [
            {
                "started_at": started_at,
                "ended_at": None,
                "start_step": 0,
                "end_step": None,
                "exit_status": "running",
                "external": True,
            }
        ],
        "started_at": started_at,
        "started_unix_time": time.time(),
        "ended_at": None,
        "exit_status": "running",
        "exit_code": None,
    }


def end_record(record: dict, *, status: str, returncode: int | None, completion: dict | None):
    ended_at = utc_now()
    record["sessions"][-1].update(
        ended_at=ended_at,
        end_step=completion["global_step"] if completion else None,
        exit_status=status,
    )
    record.update(ended_at=ended_at, exit_status=status, exit_code=returncode)
    if completion is not None:
        record["completion"] = completion


# ---- one run, start to end -----------------------------------------------------------------


def execute(run: CommandRun, *, run_dir: Path, threads: int) -> int:
    """Run (or restore) one run of `run` in `run_dir`; returns this wrapper's exit code.

    The run dir is locked (sacbench.run_lock) from before anything in it changes until the
    command has ended and its records are written: a second wrapper, or a trainer, asked for
    the same run dir stops at once, naming this one. A wrapper killed with SIGKILL drops the
    lock with its life, and the kernel stops its command (see _die_with_parent)."""
    with RunDirLock(run_dir, program=PROGRAM) as lock:
        if lock.taken_over_from:
            print(
                f"sacbench.run_command: warning: took {lock.path} over from {lock.taken_over_from}",
                file=sys.stderr,
            )
        remove_stray_temporaries(run_dir)
        return _execute_locked(run, run_dir=run_dir, threads=threads, lock=lock)


def _execute_locked(run: CommandRun, *, run_dir: Path, threads: int, lock: RunDirLock) -> int:
    finished = prepare_run_dir(run_dir, run, lock=lock)
    if finished is not None:
        if not (run_dir / COMPLETE_FILE).exists():
            write_json_atomically(run_dir / COMPLETE_FILE, finished)
        print(
            f"{run_dir} holds a finished run of this command line (finished "
            f"{finished.get('finished_at')}): complete.json is in place, nothing was run",
            flush=True,
        )
        return 0
    environment = {name: str(threads) for name in THREAD_VARIABLES} | {"PYTHONUNBUFFERED": "1"}
    record = start_record(run, run_dir=run_dir, environment=environment)
    write_json_atomically(run_dir / METADATA_FILE, record)
    print(f"running in {run_dir}: {shlex.join(run.argv)}", flush=True)
    outcome = run_command(run.argv, cwd=run_dir, environment=dict(os.environ) | environment)
    status, completion, exit_code = conclude(run_dir, outcome)
    end_record(record, status=status, returncode=outcome.returncode, completion=completion)
    # metadata.json first: once it says completed, a kill before complete.json is written
    # leaves a run that the next attempt completes without running the command again.
    write_json_atomically(run_dir / METADATA_FILE, record)
    if completion is None:
        print(f"sacbench.run_command: {status}; no complete.json written", file=sys.stderr)
        return exit_code
    write_json_atomically(run_dir / COMPLETE_FILE, completion)
    print(f"finished: last logged step {completion['global_step']}", flush=True)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sacbench.run_command",
        description="Run an external CleanRL-style training script as one run of the pipeline.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", type=Path, required=True, help="the command's working dir")
    parser.add_argument("--env-id", required=True, help="passed on as --env-id")
    parser.add_argument("--seed", type=int, required=True, help="passed on as --seed")
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        help=f"the job's threads, given to the command as {' and '.join(THREAD_VARIABLES)}",
    )
    parser.add_argument(
        "--args-json",
        default="{}",
        metavar="JSON",
        help="the script's other flags as a JSON object, e.g. '{\"total_timesteps\": 1000}'",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [WORD ...]")
    return parser.parse_args(argv)


def _command_run(options: argparse.Namespace) -> CommandRun:
    words = list(options.command)
    if words[:1] == ["--"]:
        words = words[1:]
    try:
        args = json.loads(options.args_json)
    except json.JSONDecodeError as error:
        raise CommandRunError(f"--args-json is not JSON ({error})") from None
    if not isinstance(args, dict):
        raise CommandRunError(f"--args-json must be a JSON object, got {options.args_json!r}")
    return CommandRun(command=tuple(words), env_id=options.env_id, seed=options.seed, args=args)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        run = _command_run(options)
    except CommandRunError as error:
        print(f"sacbench.run_command: error: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    try:
        return execute(run, run_dir=options.run_dir, threads=options.threads)
    except RunDirLockError as error:
        print(f"sacbench.run_command: error: {error}", file=sys.stderr)
        return EXIT_RUN_DIR_BUSY

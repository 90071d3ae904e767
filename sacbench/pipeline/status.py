"""How far the benchmark's runs have got: one row per run of the configured matrix.

    python -m sacbench.status [--configfile FILE ...] [--results-dir DIR] [--watch SECONDS]
                              [--json]

It reads only three small files per run dir (progress.json, complete.json, metadata.json), never
an event file, so it is cheap at any scale and works the same while Snakemake runs the jobs
locally or on Slurm. A run's state:

    pending  no run dir, or nothing recorded in it yet
    running  progress.json says running and was updated within --stale-after seconds; or an
             external command's run has started and not ended (it writes no progress.json)
    stale    progress.json says running but has not been updated for longer: the trainer died
             without a record (SIGKILL, out of memory, a lost node); the next snakemake resumes
             it from its last checkpoint
    failed   the last session ended with an error or a stop signal (checkpointed; the next
             snakemake resumes it), and nothing runs now; an external command's run (a command
             variant) starts again instead
    done     complete.json exists (or the last session completed every step: the note says
             which command restores complete.json, without training)
    differs  metadata.json records run-defining arguments (for a command variant: a command
             line) other than the config's: not this config's run, whatever its own state; the
             note lists each differing key with the run's value and the config's, and the
             step column shows the run's own steps
    unknown  a record could not be read (the note says which and why)

Columns: step/total and %; SPS, steps per second over about the last minute (running runs
only); ETA, the steps left over that SPS; the mean of the last 100 episodic returns so far (with
the number of episodes while fewer); the time since the last checkpoint, which is what a crash
would cost. The total line's ETA is the steps left in all unfinished runs over the summed SPS of
the running ones: the time to the end if as many runs keep going at today's pace. A run that
differs counts as none of the config's steps done.

--json prints the same rows and totals as one JSON object (one per line with --watch).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tabulate import tabulate

from sacbench.pipeline.config import (
    ConfigError,
    command_args,
    command_words,
    is_command_variant,
    load_schema,
    run_budget,
    run_trainer_args,
    validated_config,
)
from sacbench.pipeline.external import CommandRun
from sacbench.provenance import PACKAGE_DIR
from sacbench.sac.args import Args, recorded_run_args, run_defining_args
from sacbench.training.progress import PROGRESS_FILE_NAME, RETURN_WINDOW, format_duration

BASE_CONFIG = Path("config.yaml")  # the Snakefile's configfile, relative to the project dir
SCHEMA_PATH = PACKAGE_DIR.parent / "workflow" / "schemas" / "config.schema.yaml"
# Long enough for the quiet stretches of a live run (torch.compile's first compilation, loading
# a 1M-transition replay buffer on resume, a slow node at ~10 SPS writing every 100 steps), short
# next to a run's hours, so a dead run is noticed within minutes.
DEFAULT_STALE_AFTER = 600.0
STATE_ORDER: tuple[str, ...] = (
    "done", "running", "pending", "failed", "stale", "differs", "unknown"
)  # fmt: skip
# The states the total line always counts; the others only when some run is in them.
ALWAYS_COUNTED = 5
COMPLETE_MISSING = "complete.json missing"
CLEAR_SCREEN = "\033[H\033[2J"


class StatusError(ValueError):
    """Unusable input (a config file, a config value); the message names it."""


# ---- the run matrix --------------------------------------------------------------------------


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Snakemake's merge of a --configfile over the config: mappings key by key, anything else
    (lists included) replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_config(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _load_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise StatusError(f"config file {path}: cannot be read ({error.strerror})") from error
    except yaml.YAMLError as error:
        raise StatusError(f"config file {path}: not valid YAML ({error})") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise StatusError(f"config file {path}: expected a mapping of keys, got {loaded!r}")
    return loaded


def load_config(*, configfiles: Sequence[Path], base: Path = BASE_CONFIG) -> dict[str, Any]:
    """config.yaml with each configfile merged over it in order, validated, defaults filled.

    As with Snakemake, config.yaml may be absent when configfiles are given.
    """
    for path in configfiles:
        if not path.is_file():
            raise StatusError(f"--configfile {path}: no such file")
    if not base.is_file() and not configfiles:
        raise StatusError(
            f"no {base} in {Path.cwd()}: run from the project folder, or pass --configfile"
        )
    sources = ([base] if base.is_file() else []) + list(configfiles)
    config: dict[str, Any] = {}
    for path in sources:
        config = merge_config(config, _load_yaml_mapping(path))
    try:
        return validated_config(config, schema=load_schema(SCHEMA_PATH))
    except ConfigError as error:
        names = " + ".join(str(path) for path in sources)
        raise StatusError(f"{names}: {error}") from error


@dataclass(frozen=True)
class RunKey:
    variant: str
    env_id: str
    seed: int
    total_timesteps: int
    defining: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    """what defines the config's run, as metadata.json records it (expected_run); None: not
    compared"""

    def run_dir(self, results_dir: Path) -> Path:
        return results_dir / "runs" / self.variant / self.env_id / str(self.seed)


def run_matrix(config: Mapping[str, Any]) -> list[RunKey]:
    """Every variant x env x seed, in the pipeline's order."""
    return [
        RunKey(
            variant,
            env_id,
            seed,
            run_budget(config, variant=variant)[0],
            defining=expected_run(config, variant=variant, env_id=env_id, seed=seed),
        )
        for variant in config["variants"]
        for env_id in config["env_ids"]
        for seed in config["seeds"]
    ]


def expected_run(
    config: Mapping[str, Any], *, variant: str, env_id: str, seed: int
) -> dict[str, Any]:
    """What defines one run of the config, as its metadata.json records it: the trainer's
    run-defining args as the train rule passes them (the variant is the experiment name), or a
    command variant's command line ({"argv": [...]}, as python -m sacbench.run_command runs it)."""
    if is_command_variant(config, variant=variant):
        words = command_words(config["variants"][variant]["command"])
        run = CommandRun(tuple(words), env_id, seed, command_args(config, variant=variant))
        return {"argv": run.argv}
    args = run_trainer_args(config, variant=variant, env_id=env_id, seed=seed)
    return run_defining_args(Args(**args, env_id=env_id, seed=seed, exp_name=variant))


def differing_args(
    defining: Mapping[str, Any] | None, metadata: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """{key: (the run's value, the config's)} for each key that defines the run and that the run
    dir's metadata.json records otherwise; empty when nothing is recorded yet."""
    if defining is None or not metadata:
        return {}
    if "argv" in defining:
        recorded: Mapping[str, Any] = {"argv": _mapping(metadata.get("command")).get("argv")}
    elif isinstance(metadata.get("args"), Mapping):
        recorded = recorded_run_args(dict(metadata["args"]))
    else:
        return {}
    return {
        key: (recorded.get(key, "<missing>"), value)
        for key, value in defining.items()
        if recorded.get(key, "<missing>") != value
    }


# ---- one run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStatus:
    key: RunKey
    state: str
    global_step: int
    sps: float | None = None  # recent steps per second, only while running
    recent_return: float | None = None
    recent_episodes: int = 0
    checkpoint_unix_time: float | None = None
    note: str = ""
    differs: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    """{key: (the run's value, the config's)} when the state is differs"""
    run_total: int | None = None
    """the run's own total_timesteps when it differs from the config's run"""

    @property
    def remaining_steps(self) -> int:
        if self.state == "differs":  # none of the config's steps are done
            return self.key.total_timesteps
        return 0 if self.state == "done" else max(self.key.total_timesteps - self.global_step, 0)

    @property
    def share_percent(self) -> float | None:
        """The share of the config's run done (None for a run that differs)."""
        if self.state == "differs":
            return None
        return 100 * self.global_step / self.key.total_timesteps

    @property
    def eta_seconds(self) -> float | None:
        if self.state != "running" or not self.sps:
            return None
        return self.remaining_steps / self.sps


class _Unreadable(Exception):
    pass


def _read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, None when it does not exist; _Unreadable when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _Unreadable(f"{path.name} unreadable ({error.strerror})") from error
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as error:
        raise _Unreadable(f"{path.name} is not JSON ({error.msg})") from error
    if not isinstance(loaded, dict):
        raise _Unreadable(f"{path.name} is not a JSON object")
    return loaded


def read_run_status(
    key: RunKey,
    *,
    results_dir: Path,
    now: float,
    stale_after: float,
    snakemake_options: str = "",
) -> RunStatus:
    """One run's row. `snakemake_options`: what snakemake needs after its targets to make the
    config's runs (the note of a run whose complete.json is missing names the command)."""
    run_dir = key.run_dir(results_dir)
    try:
        progress = _read_json(run_dir / PROGRESS_FILE_NAME) or {}
    except _Unreadable as error:
        return RunStatus(key, "unknown", 0, note=str(error))
    problems = []
    try:
        metadata = _read_json(run_dir / "metadata.json") or {}
    except _Unreadable as error:  # progress.json alone still tells all but an error's message
        metadata, problems = {}, [str(error)]
    session = _last_session(metadata)
    complete = (run_dir / "complete.json").exists()  # existence is the pipeline's contract
    state, note = classify(
        complete=complete, progress=progress, session=session, now=now, stale_after=stale_after
    )
    step = _number(progress.get("global_step"))
    if step is None:
        step = _number(session.get("end_step")) or _number(session.get("start_step"))
    differs = differing_args(key.defining, metadata)
    run_total = _number(progress.get("total_timesteps"))
    if run_total is None:
        run_total = _number(_mapping(metadata.get("args")).get("total_timesteps"))
    if differs:
        state, note = "differs", _differs_note(differs, own_state=state)
        if complete and run_total is not None:
            step = run_total
    elif state == "done":
        step = key.total_timesteps
        if note == COMPLETE_MISSING:
            command = f"snakemake --cores 1 {run_dir / 'complete.json'} {snakemake_options}"
            note += f": `{command.strip()}` restores it, without training"
    recent = _mapping(progress.get("recent_returns"))
    return RunStatus(
        key,
        state,
        int(step or 0),
        sps=_number(progress.get("sps")) if state == "running" else None,
        recent_return=_number(recent.get("mean")),
        recent_episodes=int(_number(recent.get("count")) or 0),
        checkpoint_unix_time=_number(_mapping(progress.get("last_checkpoint")).get("unix_time")),
        note="; ".join(text for text in (note, *problems) if text),
        differs=differs,
        run_total=None if run_total is None else int(run_total),
    )


def _differs_note(differs: Mapping[str, tuple[Any, Any]], *, own_state: str) -> str:
    """Each differing key with the run's value and the config's; the run's own state."""
    shown = "; ".join(
        f"{key} {_shorten(repr(run), 40)} (config {_shorten(repr(configured), 40)})"
        for key, (run, configured) in differs.items()
    )
    return f"{own_state} run of other args: {shown}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _last_session(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    sessions = metadata.get("sessions")
    return _mapping(sessions[-1]) if isinstance(sessions, list) and sessions else {}


def classify(
    *,
    complete: bool,
    progress: Mapping[str, Any],
    session: Mapping[str, Any],
    now: float,
    stale_after: float,
) -> tuple[str, str]:
    """(state, note) of one run from its records (progress.json, the last session in
    metadata.json, whether complete.json exists); see the module docstring."""
    if complete:
        return "done", ""
    ended = session.get("exit_status")
    # A session that has ended wrote its end to metadata.json last: that record is final.
    if ended and ended != "running":
        if ended == "completed":
            return "done", COMPLETE_MISSING
        if str(ended).startswith("signal"):
            stopped = str(ended).removeprefix("signal ")
            return "failed", f"stopped by {stopped} at step {session.get('end_step')}, resumable"
        return "failed", _shorten(str(ended))
    if not progress:
        if not session:
            return "pending", ""
        if session.get("external"):  # python -m sacbench.run_command writes no progress.json
            return "running", "external command: no progress reports, see its log"
        age = now - _iso_to_unix(session.get("started_at"))
        if age > stale_after:
            return "stale", f"started {_duration(age)} ago, no progress.json"
        return "running", "no progress.json yet"
    recorded = progress.get("state")
    if recorded == "running":
        age = now - (_number(progress.get("updated_unix_time")) or 0.0)
        if age > stale_after:
            return "stale", f"no update for {_duration(age)} (trainer gone?)"
        return "running", ""
    if recorded in ("stopped", "failed"):
        return "failed", f"{recorded} at step {progress.get('global_step')}"
    if recorded == "completed":
        return "done", COMPLETE_MISSING
    return "unknown", f"progress.json state {recorded!r}"


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def _iso_to_unix(text: object) -> float:
    try:
        return dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return 0.0  # no usable start time: old enough to count as stale


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- the report ----------------------------------------------------------------------------


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    return format_duration(seconds)


def _row(status: RunStatus, *, now: float) -> list[str]:
    key = status.key
    checkpoint_age = None
    if status.checkpoint_unix_time is not None and status.state != "done":
        checkpoint_age = now - status.checkpoint_unix_time
    recent = "–"
    if status.recent_return is not None:
        recent = f"{status.recent_return:.1f}"
        if status.recent_episodes < RETURN_WINDOW:  # a mean of few episodes, so say how few
            recent += f" ({status.recent_episodes} ep)"
    step, share = f"{status.global_step:,}/{key.total_timesteps:,}", status.share_percent
    if status.state == "differs":  # the run's own steps: none of them are the config's
        step = f"{status.global_step:,}/" + (
            "?" if status.run_total is None else f"{status.run_total:,}"
        )
    return [
        key.variant,
        key.env_id,
        str(key.seed),
        status.state,
        step,
        "–" if share is None else f"{share:.1f}",
        "–" if status.sps is None else f"{status.sps:.1f}",
        _duration(status.eta_seconds),
        recent,
        _duration(checkpoint_age),
        status.note,
    ]


HEADERS = (
    "variant", "env", "seed", "state", "step", "%", "SPS", "ETA",
    "return (last 100)", "since ckpt", "note",
)  # fmt: skip


def total_line(statuses: Sequence[RunStatus]) -> str:
    """Counts per state, the share of all steps done, and the overall ETA: the steps every
    unfinished run still needs, over the summed current SPS of the running ones (as if the
    jobs that run now kept running at this pace and the others took their place)."""
    figures = totals(statuses)
    counts, remaining, rate = figures["states"], figures["remaining_steps"], figures["running_sps"]
    shown = [
        f"{counts[state]} {state}"
        for index, state in enumerate(STATE_ORDER)
        if index < ALWAYS_COUNTED or counts[state]
    ]
    share = figures["percent_done"]
    if not remaining:
        eta = "– (all done)"
    elif rate > 0:
        eta = f"{_duration(remaining / rate)} ({remaining:,} steps left at {rate:.1f} steps/s)"
    else:
        eta = f"– (nothing running; {remaining:,} steps left)"
    return f"total: {len(statuses)} runs, {', '.join(shown)}; {share:.1f}% of steps done; ETA {eta}"


def totals(statuses: Sequence[RunStatus]) -> dict[str, Any]:
    """The total line's figures: counts per state, steps, the summed SPS of the running runs and
    the overall ETA (None when nothing runs or nothing is left)."""
    total = sum(s.key.total_timesteps for s in statuses)
    remaining = sum(s.remaining_steps for s in statuses)
    rate = sum(s.sps or 0.0 for s in statuses if s.state == "running")
    return {
        "runs": len(statuses),
        "states": {state: sum(s.state == state for s in statuses) for state in STATE_ORDER},
        "total_steps": total,
        "remaining_steps": remaining,
        "percent_done": 100 * (total - remaining) / total if total else 100.0,
        "running_sps": rate,
        "eta_seconds": remaining / rate if remaining and rate > 0 else None,
    }


def as_json(statuses: Sequence[RunStatus], *, now: float, results_dir: Path) -> dict[str, Any]:
    """The table's rows and the total line as data (--json); times in seconds, None for –."""
    return {
        "results_dir": str(results_dir),
        "at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
        "runs": [_json_row(status, now=now, results_dir=results_dir) for status in statuses],
        "total": totals(statuses),
    }


def _json_row(status: RunStatus, *, now: float, results_dir: Path) -> dict[str, Any]:
    key = status.key
    checkpoint_age = None
    if status.checkpoint_unix_time is not None and status.state != "done":
        checkpoint_age = now - status.checkpoint_unix_time
    return {
        "variant": key.variant,
        "env_id": key.env_id,
        "seed": key.seed,
        "state": status.state,
        "global_step": status.global_step,
        "total_timesteps": key.total_timesteps,
        "percent": status.share_percent,
        "sps": status.sps,
        "eta_seconds": status.eta_seconds,
        "recent_return": status.recent_return,
        "recent_episodes": status.recent_episodes,
        "seconds_since_checkpoint": checkpoint_age,
        "note": status.note,
        "run_dir": str(key.run_dir(results_dir)),
        "differs": {
            name: {"run": run, "config": configured}
            for name, (run, configured) in status.differs.items()
        },
        "run_total_timesteps": status.run_total,
    }


def render(statuses: Sequence[RunStatus], *, now: float, results_dir: Path) -> str:
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds")
    table = tabulate([_row(s, now=now) for s in statuses], headers=HEADERS, disable_numparse=True)
    return f"{results_dir}/runs at {stamp}\n{table}\n{total_line(statuses)}"


# ---- command line --------------------------------------------------------------------------


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sacbench.status",
        description="Show how far each run of the configured benchmark has got.",
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        type=Path,
        default=[],
        metavar="FILE",
        help="merged over ./config.yaml in order, as snakemake --configfile does",
    )
    parser.add_argument(
        "--results-dir", type=Path, metavar="DIR", help="overrides the config's results_dir"
    )
    parser.add_argument(
        "--watch",
        type=_positive_seconds,
        metavar="SECONDS",
        help="print again every SECONDS until Ctrl-C",
    )
    parser.add_argument(
        "--stale-after",
        type=_positive_seconds,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help=f"a running run not updated for longer is stale (default {DEFAULT_STALE_AFTER:.0f})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the rows and totals as JSON, for scripts"
    )
    return parser.parse_args(argv)


def report(
    keys: Sequence[RunKey],
    *,
    results_dir: Path,
    stale_after: float,
    snakemake_options: str = "",
    as_data: bool = False,
) -> str:
    """The table, or with as_data its JSON (on one line)."""
    now = time.time()
    statuses = [
        read_run_status(
            key,
            results_dir=results_dir,
            now=now,
            stale_after=stale_after,
            snakemake_options=snakemake_options,
        )
        for key in keys
    ]
    if as_data:
        return json.dumps(as_json(statuses, now=now, results_dir=results_dir))
    return render(statuses, now=now, results_dir=results_dir)


def snakemake_options(options: argparse.Namespace, config: Mapping[str, Any]) -> str:
    """The snakemake options that make the runs status shows: the same configfiles, and the
    results dir when --results-dir moved it. They go after the targets, which --configfile and
    --config (each takes several values) would otherwise swallow."""
    words: list[str] = []
    for path in options.configfile:
        words += ["--configfile", str(path)]
    if options.results_dir is not None and options.results_dir != Path(config["results_dir"]):
        words += ["--config", f"results_dir={options.results_dir}"]
    return shlex.join(words)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        config = load_config(configfiles=options.configfile)
    except StatusError as error:
        print(f"sacbench.status: error: {error}", file=sys.stderr)
        return 2
    results_dir = options.results_dir or Path(config["results_dir"])
    keys = run_matrix(config)
    settings = {
        "results_dir": results_dir,
        "stale_after": options.stale_after,
        "snakemake_options": snakemake_options(options, config),
        "as_data": options.json,
    }
    if options.watch is None:
        print(report(keys, **settings))
        return 0
    # Clearing the screen only makes sense on a terminal (and never between JSON lines); a log
    # file keeps every print.
    clear = CLEAR_SCREEN if sys.stdout.isatty() and not options.json else ""
    try:
        while True:
            print(f"{clear}{report(keys, **settings)}" + ("" if options.json else "\n"), flush=True)
            time.sleep(options.watch)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())

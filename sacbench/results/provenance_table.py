"""Every table's opening line (which runs it covers) and its closing provenance section:
software, hardware and the run-defining args, one row per entry of PROVENANCE."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

from sacbench.results.render import markdown_table
from sacbench.results.runs import Run, RunSet


def _command_words(run: Run) -> list[str] | None:
    """An external command's program and first arguments (metadata.json of run_command)."""
    words = run.summary_value("command", "words")
    return [str(word) for word in words] if isinstance(words, list) else None


def _sacbench_text(run: Run) -> str | None:
    if _command_words(run) is not None:
        return "none (an external command)"
    version = run.summary_value("sacbench", "version")
    if version is None:
        return None
    describe = run.summary_value("sacbench", "git_describe") or "git describe not recorded"
    commit = run.summary_value("sacbench", "git_commit")
    dirty = run.summary_value("sacbench", "git_dirty")
    parts = [describe]
    if commit:
        parts.append(f"commit {str(commit)[:12]}")
    if dirty is True:
        parts.append("uncommitted changes")
    return f"{version} ({', '.join(parts)})"


def _gpu_text(run: Run) -> str | None:
    """The GPU's model, "none" for a run recorded on the CPU; None when nothing is recorded (an
    external command's host record cannot know whether its script used a GPU)."""
    host = run.summary_value("host")
    if not isinstance(host, dict) or "gpu_model" not in host:
        return None
    return host["gpu_model"] or "none"


def _program_of(run: Run) -> str:
    words = _command_words(run)
    if words is not None:
        return f"`{shlex.join(words)}`".replace("|", "\\|")  # a | would end the table cell
    return "sacbench's trainer" if run.summary_value("sacbench") is not None else "not recorded"


def _program_text(runset: RunSet) -> str:
    """Which program each variant's runs ran: an external command, or sacbench's trainer."""
    programs: dict[str, set[str]] = {}
    for key, run in runset.runs.items():
        programs.setdefault(key.variant, set()).add(_program_of(run))
    return "; ".join(
        f"`{variant}`: {' / '.join(sorted(programs[variant]))}"
        for variant in runset.selection.variants
        if variant in programs
    )


FORMULATION_NAMES = {
    "fused": "fused C++",
    "handwritten": "eager hand-written",
    "autograd": "autograd",
}


def _one_update_text(record: dict[str, Any]) -> str:
    """A session's `update` record (sacbench.sac.learners.update_record) in words."""
    gradients = record.get("gradients")
    name = FORMULATION_NAMES.get(str(gradients), str(gradients))
    ran = f"fast, {name}" if record.get("path") == "fast" else str(record.get("path"))
    products = f"float32 products: {record.get('float32_products_library')}"
    if record.get("mkl_kernels") == "avx2":
        products += ", MKL's AVX2 kernels"
    if record.get("bf16_products"):
        products = f"bf16 products, {products}"
    unbuilt = "; the fused update did not build" if record.get("fused_update_unavailable") else ""
    return f"{ran} ({products}{unbuilt})"


def _update_of(run: Run) -> str | None:
    """The updates a run's sessions ran, in order, each once; None where none is recorded (runs
    of external commands, and of sacbench before it recorded them)."""
    sessions = run.summary_value("sessions")
    records = [
        session["update"]
        for session in (sessions if isinstance(sessions, list) else [])
        if isinstance(session, dict) and isinstance(session.get("update"), dict)
    ]
    texts = list(dict.fromkeys(_one_update_text(record) for record in records))
    return " then ".join(texts) if texts else None


def _update_text(runset: RunSet) -> str:
    """Which update each variant's runs ran, with its products' library."""
    updates: dict[str, set[str]] = {}
    for key, run in runset.runs.items():
        updates.setdefault(key.variant, set()).add(_update_of(run) or "not recorded")
    return "; ".join(
        f"`{variant}`: {' / '.join(sorted(updates[variant]))}"
        for variant in runset.selection.variants
        if variant in updates
    )


PROVENANCE: tuple[tuple[str, Callable[[Run], Any]], ...] = (
    ("sacbench", _sacbench_text),
    ("steps per run (total_timesteps)", lambda run: run.summary_value("args", "total_timesteps")),
    ("learning_starts", lambda run: run.summary_value("args", "learning_starts")),
    ("CPU model", lambda run: run.summary_value("host", "cpu_model")),
    ("GPU model", _gpu_text),
    ("device", lambda run: run.summary_value("host", "device")),
    ("torch threads", lambda run: run.summary_value("host", "torch_threads")),
    ("python", lambda run: run.summary_value("versions", "python")),
    ("torch", lambda run: run.summary_value("versions", "torch")),
    ("gymnasium", lambda run: run.summary_value("versions", "gymnasium")),
    ("mujoco", lambda run: run.summary_value("versions", "mujoco")),
    ("numpy", lambda run: run.summary_value("versions", "numpy")),
    (
        "training sessions per run",
        lambda run: (
            len(run.summary["sessions"]) if isinstance(run.summary.get("sessions"), list) else None
        ),
    ),
)


def _value_text(runs: Sequence[Run], getter: Callable[[Run], Any]) -> str:
    groups: dict[str, list[str]] = {}
    for run in runs:
        value = getter(run)
        groups.setdefault("not recorded" if value is None else str(value), []).append(run.key.label)
    if len(groups) == 1:
        return next(iter(groups))
    parts = []
    for value, labels in groups.items():
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        runs_word = "run" if len(labels) == 1 else "runs"
        parts.append(f"{value} ({len(labels)} {runs_word}: {shown})")
    return "**differs between runs:** " + "; ".join(parts)


def heading_lines(runset: RunSet, *, title: str, command: str) -> list[str]:
    """The title and the sentence naming the runs the table covers; the results follow."""
    selection = runset.selection
    variants = ", ".join(f"`{variant}`" for variant in selection.variants)
    return [
        f"# {title}",
        "",
        f"Generated by `python -m sacbench.report {command}` from {len(runset.runs)} of "
        f"{len(selection.run_keys())} runs: variants {variants}"
        f"; tasks {', '.join(selection.env_ids)}; seeds {', '.join(map(str, selection.seeds))}.",
    ]


def provenance_section(runset: RunSet) -> list[str]:
    """The "## Provenance" section that closes every table, after its results and notes."""
    runs = [runset.runs[key] for key in sorted(runset.runs)]
    rows = [[name, _value_text(runs, getter) if runs else "no runs"] for name, getter in PROVENANCE]
    rows.insert(1, ["update (products)", _update_text(runset) if runs else "no runs"])
    if any(_command_words(run) is not None for run in runs):
        # Only where a variant ran an external command, so other tables keep their rows.
        rows.insert(1, ["program", _program_text(runset)])
    header = ["Item", "Value (from the runs' metadata.json)"]
    return ["", "## Provenance", "", *markdown_table(header, rows, "ll")]

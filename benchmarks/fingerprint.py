"""Is training unchanged? This checkout's trainer against another source tree's, scalar for scalar.

Runs the same short `python -m sacbench.train` (Hopper-v4 by default, one thread) once with each
tree's own sacbench, for each update path of `--paths` (the reference path, and the fast path's
default update), then compares what the two runs of a path left:
- every scalar of the event files except the clock's (sacbench.tags.CLOCK_TAGS: SPS, steady SPS,
  elapsed and evaluation seconds), step and float32 value, exactly;
- every tensor and array of the final checkpoint (checkpoint/state.pt: the networks, the
  optimizers' states, alpha, the replay buffer), by SHA-256 of its dtype, shape and bytes.
It prints, per path, "identical" with what was compared, or the first differences, and exits 1
when any path differs. Both sides are read by this checkout's readers; only the trainers differ.

    git archive 5ad71e7 | tar -x -C /tmp/old    # a tree to compare against (no .git needed)
    python -m benchmarks.fingerprint --against /tmp/old
    python -m benchmarks.fingerprint --against /tmp/old --paths reference \\
        --total-timesteps 400 --learning-starts 100 --batch-size 16
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sacbench.events import read_run_scalars
from sacbench.tags import CLOCK_TAGS
from sacbench.training.checkpoint import load_state
from sacbench.training.envs import EnvError, env_spaces

THIS_TREE = Path(__file__).resolve().parents[1]
PATHS = ("reference", "fast")
# Recorded in the checkpoint but read from the clock or named after it.
CLOCK_STATE_KEYS = {"elapsed_seconds", "event_files", "completion"}
SHOWN = 5  # differences printed per path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="another sacbench tree")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--env-id", default="Hopper-v4")
    parser.add_argument("--total-timesteps", type=int, default=1_500)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=64)
    options = parser.parse_args(argv)
    options.against = options.against.expanduser().resolve()
    if not (options.against / "sacbench" / "train.py").is_file():
        parser.error(f"--against {options.against}: no sacbench/train.py there")
    for name in ("total_timesteps", "learning_starts", "batch_size"):
        if getattr(options, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if options.total_timesteps <= options.learning_starts:
        parser.error("--total-timesteps must exceed --learning-starts: no update would run")
    try:
        env_spaces(options.env_id)
    except EnvError as error:
        parser.error(f"--env-id: {error}")
    return options


def train(tree: Path, run_dir: Path, *, path: str, options: argparse.Namespace) -> None:
    """One run of `tree`'s own trainer (its directory first on sys.path: python -m, cwd)."""
    flags = ["--env-id", options.env_id, "--seed", "1", "--threads", "1", "--update-path", path,
             "--total-timesteps", str(options.total_timesteps), "--learning-starts",
             str(options.learning_starts), "--batch-size", str(options.batch_size)]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-m", "sacbench.train", "--run-dir", str(run_dir), *flags],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the trainer failed ({done.returncode}):\n{done.stderr[-2000:]}")


def scalars(run_dir: Path) -> dict[tuple[str, int], list[float]]:
    """{(tag, step): values} of every scalar but the clock's."""
    table = read_run_scalars(run_dir)
    out: dict[tuple[str, int], list[float]] = {}
    for tag, step, value in zip(table["tag"], table["step"], table["value"], strict=True):
        if tag not in CLOCK_TAGS:
            out.setdefault((tag, int(step)), []).append(float(value))
    return out


def digests(tree: Any, prefix: str = "") -> dict[str, str]:
    """{name: digest} of every tensor, array and plain value in a checkpoint's nested state."""
    if isinstance(tree, torch.Tensor):
        tree = tree.detach().cpu().contiguous().numpy()
    if isinstance(tree, np.ndarray):
        data = np.ascontiguousarray(tree)
        described = f"{data.dtype}{data.shape}".encode() + data.tobytes()
        return {prefix: hashlib.sha256(described).hexdigest()[:16]}
    if isinstance(tree, dict):
        return {
            name: digest
            for key, value in tree.items()
            if not (prefix == "" and key in CLOCK_STATE_KEYS)
            for name, digest in digests(value, f"{prefix}/{key}").items()
        }
    if isinstance(tree, list | tuple):
        return {
            name: digest
            for index, value in enumerate(tree)
            for name, digest in digests(value, f"{prefix}[{index}]").items()
        }
    return {prefix: repr(tree)}


def record(tree: Path, run_dir: Path, *, path: str, options: argparse.Namespace) -> dict:
    train(tree, run_dir, path=path, options=options)
    state = load_state(run_dir / "checkpoint" / "state.pt")
    return {"scalars": scalars(run_dir), "state": digests(state)}


def differences(ours: dict, theirs: dict) -> list[str]:
    """What differs between two records, one line each, scalars first."""
    lines = []
    for kind in ("scalars", "state"):
        for key in sorted(ours[kind].keys() | theirs[kind].keys(), key=str):
            mine, other = ours[kind].get(key, "missing"), theirs[kind].get(key, "missing")
            if mine != other:
                lines.append(f"{kind} {key}: this tree {mine}, --against {other}")
    return lines


def summary(ours: dict, theirs: dict) -> str:
    """Which tags and how many checkpoint entries differ."""
    keys = ours["scalars"].keys() | theirs["scalars"].keys()
    tags = sorted({tag for tag, step in keys if ours["scalars"].get((tag, step))
                   != theirs["scalars"].get((tag, step))})  # fmt: skip
    names = ours["state"].keys() | theirs["state"].keys()
    entries = sum(ours["state"].get(name) != theirs["state"].get(name) for name in names)
    return f"differing tags: {', '.join(tags) or 'none'}; differing checkpoint entries: {entries}"


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    differ = False
    with tempfile.TemporaryDirectory(prefix="sacbench-fingerprint-") as scratch:
        for path in options.paths:
            ours, theirs = (
                record(tree, Path(scratch) / f"{side}-{path}", path=path, options=options)
                for side, tree in (("this", THIS_TREE), ("against", options.against))
            )
            found = differences(ours, theirs)
            if found:
                differ = True
                print(f"{path}: DIFFERENT, {len(found)} items; the first:")
                print("\n".join(f"  {line}" for line in found[:SHOWN]))
                print(f"  {summary(ours, theirs)}")
                continue
            values = sum(len(points) for points in ours["scalars"].values())
            tags = len({tag for tag, _ in ours["scalars"]})
            print(f"{path}: identical: {values} scalars over {tags} tags (clock tags left out), "
                  f"{len(ours['state'])} checkpoint entries")  # fmt: skip
    print(f"{options.env_id}, {options.total_timesteps} steps, learning_starts "
          f"{options.learning_starts}, batch {options.batch_size}, 1 thread; this tree "
          f"{THIS_TREE}, --against {options.against}")  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

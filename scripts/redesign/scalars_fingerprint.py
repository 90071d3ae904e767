"""Behaviour fingerprint of sacbench's training, to diff before and after the restructure.

Run it with the same interpreter at the old and at the new commit (each in its own worktree),
then compare the two JSON files with `diff` (they must be identical):

    python scripts/redesign/scalars_fingerprint.py --repo OLD_TREE --out /tmp/old.json
    python scripts/redesign/scalars_fingerprint.py --repo NEW_TREE --out /tmp/new.json
    diff /tmp/old.json /tmp/new.json && echo IDENTICAL

What it records:
1. end to end, through `python -m sacbench.train` only (the CLI must stay identical): for each
   configuration below, every scalar except the clock-dependent ones (exact float32 values, as
   repr), the tags' set, complete.json's global_step, and a SHA-256 of every tensor of the final
   learner state in checkpoint/state.pt;
2. in process, the three gradient formulations (reference, fast/handwritten, fast/autograd) on
   fixed random batches: every metric of every update and a hash of every parameter after them.
   The autograd formulation is only reachable from the CLI with --compile, hence this part.
Cross-version resume (optional): `--make-legacy DIR` at the OLD commit leaves a run killed just
before its final state (its last periodic checkpoint in the old format); `--resume-legacy DIR` at
the NEW commit resumes it and records its scalars under "legacy-resume", which must equal the
uninterrupted "fast" run's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TIME_TAGS = {"charts/SPS", "charts/steady_SPS", "charts/elapsed_seconds"}
BASE = [
    "--env-id",
    "Hopper-v4",
    "--total-timesteps",
    "1500",
    "--learning-starts",
    "1000",
    "--batch-size",
    "64",
    "--checkpoint-interval",
    "250",
    "--threads",
    "1",
]
RUNS = {
    "fast": [*BASE, "--update-path", "fast"],
    "reference": [*BASE, "--update-path", "reference"],
    "fast-no-autotune": [*BASE, "--update-path", "fast", "--no-autotune", "--alpha", "0.3"],
    "reference-no-autotune": [
        *BASE,
        "--update-path",
        "reference",
        "--no-autotune",
        "--alpha",
        "0.3",
    ],
    "fast-pf3": [
        *BASE,
        "--update-path",
        "fast",
        "--policy-frequency",
        "3",
        "--target-network-frequency",
        "2",
    ],
}
QUICK = [
    "--env-id",
    "InvertedPendulum-v4",
    "--total-timesteps",
    "300",
    "--learning-starts",
    "200",
    "--batch-size",
    "16",
    "--checkpoint-interval",
    "100",
    "--threads",
    "1",
]


def trainer(repo: Path, run_dir: Path, flags: list[str], **env: str) -> None:
    environment = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(repo), **env}
    done = subprocess.run(
        [sys.executable, "-m", "sacbench.train", "--run-dir", str(run_dir), *flags],
        cwd=repo,
        env=environment,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and not env:
        raise SystemExit(f"trainer failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def scalars(run_dir: Path) -> dict[str, list[list]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    out: dict[str, list[list]] = {}
    for path in sorted(run_dir.glob("*tfevents*")):
        accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            out.setdefault(tag, []).extend(
                [e.step, repr(e.value)] for e in accumulator.Scalars(tag)
            )
        for tag in accumulator.Tags()["tensors"]:
            if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
                out.setdefault(tag, []).extend(
                    [e.step, repr(float(tensor_util.make_ndarray(e.tensor_proto).item()))]
                    for e in accumulator.Tensors(tag)
                )
    return {tag: sorted(points) for tag, points in sorted(out.items()) if tag not in TIME_TAGS}


def tensor_hashes(tree, prefix: str = "") -> dict[str, str]:
    import torch

    if isinstance(tree, torch.Tensor):
        data = tree.detach().cpu().contiguous()
        return {
            prefix: f"{data.dtype}{tuple(data.shape)}:"
            + hashlib.sha256(data.reshape(-1).numpy().tobytes()).hexdigest()
        }
    if isinstance(tree, dict):
        out: dict[str, str] = {}
        for key, value in tree.items():
            out.update(tensor_hashes(value, f"{prefix}.{key}"))
        return out
    if isinstance(tree, list | tuple):
        out = {}
        for index, value in enumerate(tree):
            out.update(tensor_hashes(value, f"{prefix}[{index}]"))
        return out
    return {prefix: repr(tree)} if isinstance(tree, int | float | bool | str | None) else {}


def run_record(run_dir: Path) -> dict:
    import torch

    state = torch.load(
        run_dir / "checkpoint" / "state.pt", map_location="cpu", weights_only=False
    )  # our own file, written a moment ago
    learner = {key: value for key, value in state["learner"].items() if key != "last"}
    return {
        "scalars": scalars(run_dir),
        "complete_global_step": json.loads((run_dir / "complete.json").read_text())["global_step"],
        "final_learner": tensor_hashes(learner),
    }


def learner_classes():
    """(Args, ReferenceLearner, FastLearner, update_schedule, Batch) at either commit."""
    try:
        from sacbench.sac.algorithm import Batch, update_schedule
        from sacbench.sac.args import Args
        from sacbench.sac.fast_learner import FastLearner
        from sacbench.sac.reference_learner import ReferenceLearner
    except ImportError:
        from sacbench.args import Args
        from sacbench.fast import FastLearner
        from sacbench.replay import Batch

        from sacbench.train import ReferenceLearner, update_schedule
    return Args, ReferenceLearner, FastLearner, update_schedule, Batch


def formulations() -> dict:
    import numpy as np
    import torch

    Args, ReferenceLearner, FastLearner, update_schedule, Batch = learner_classes()
    torch.set_num_threads(1)
    low = np.array([-1.0, -0.5, 0.0], dtype=np.float32)
    high = np.array([1.0, 2.5, 4.0], dtype=np.float32)
    out = {}
    for autotune in (True, False):
        for policy_frequency in (2, 3):
            for path in ("reference", "fast-handwritten", "fast-autograd"):
                torch.manual_seed(0)
                args = Args(
                    batch_size=32, autotune=autotune, alpha=0.3, policy_frequency=policy_frequency
                )
                reference = ReferenceLearner(
                    obs_dim=11,
                    action_low=low,
                    action_high=high,
                    args=args,
                    device=torch.device("cpu"),
                )
                learner = (
                    reference
                    if path == "reference"
                    else FastLearner.from_reference(
                        reference, device=torch.device("cpu"), gradients=path.split("-")[1]
                    )
                )
                generator = torch.Generator().manual_seed(1)
                torch.manual_seed(2)
                metrics = []
                for step in range(5001, 5013):
                    batch = Batch(
                        observations=torch.randn(32, 11, generator=generator),
                        next_observations=torch.randn(32, 11, generator=generator),
                        actions=torch.rand(32, 3, generator=generator) * 2 - 1,
                        rewards=torch.randn(32, generator=generator),
                        terminations=(torch.rand(32, generator=generator) < 0.3).float(),
                    )
                    schedule = update_schedule(
                        step,
                        learning_starts=5000,
                        policy_frequency=policy_frequency,
                        target_network_frequency=1,
                    )
                    result = learner.update(batch, schedule)
                    metrics.append({k: repr(float(v)) for k, v in sorted(result.items())})
                state = {k: v for k, v in learner.state_dict().items() if k != "last"}
                out[f"{path}/autotune={autotune}/pf={policy_frequency}"] = {
                    "metrics": metrics,
                    "state": tensor_hashes(state),
                }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="one tiny run: checks the script")
    parser.add_argument("--make-legacy", type=Path)
    parser.add_argument("--resume-legacy", type=Path)
    options = parser.parse_args()
    repo = options.repo.resolve()
    sys.path.insert(0, str(repo))
    where = subprocess.run(
        [sys.executable, "-c", "import sacbench; print(sacbench.__file__)"],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(repo):
        raise SystemExit(f"sacbench resolves to {where}, not into {repo}: check PYTHONPATH")
    import sacbench

    if not Path(sacbench.__file__).resolve().is_relative_to(repo):
        raise SystemExit(f"in process, sacbench is {sacbench.__file__}, not under {repo}")
    if options.make_legacy:
        trainer(repo, options.make_legacy, RUNS["fast"], SACBENCH_TEST_KILL_AT="before-final-state")
        assert (options.make_legacy / "checkpoint" / "state.pt").exists()
        return
    record: dict = {}
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as scratch:
        runs = {"quick": QUICK} if options.quick else RUNS
        for name, flags in runs.items():
            trainer(repo, Path(scratch) / name, flags)
            record[name] = run_record(Path(scratch) / name)
    if options.resume_legacy:
        trainer(repo, options.resume_legacy, RUNS["fast"])
        record["legacy-resume"] = {"scalars": scalars(options.resume_legacy)}
        assert record["legacy-resume"]["scalars"] == record["fast"]["scalars"], "resume differs"
    record["formulations"] = formulations()
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if options.out:
        options.out.write_text(text)
    print(f"{len(record)} records, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()

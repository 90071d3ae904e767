"""Behaviour fingerprint of sacbench's training, to diff before and after the restructure.

Run it with the same interpreter at the old and at the new commit (each in its own worktree),
then compare the two JSON files with `diff` (they must be identical):

    python scripts/redesign/scalars_fingerprint.py --repo OLD_TREE --out /tmp/old.json
    python scripts/redesign/scalars_fingerprint.py --repo NEW_TREE --out /tmp/new.json
    diff /tmp/old.json /tmp/new.json && echo IDENTICAL

What it records:
1. end to end, through `python -m sacbench.train` only (the CLI must stay identical): for each
   configuration below, every scalar except the clock-dependent ones (exact float32 values, as
   repr), the tags' set, complete.json's global_step, and a SHA-256 of every tensor of the
   learner state at the last periodic checkpoint (step 1,250). That checkpoint, not the final
   state, because trees older than the final state (c69aed0, the redesign's baseline) keep no
   learner after step 1,250: each run is stopped just before it writes its final state (trees
   with a final state obey SACBENCH_TEST_KILL_AT; older ones ignore it and finish), its scalars
   and checkpoint are read, and then it is finished by a resume, which must leave the scalars
   as they were;
2. in process, the three gradient formulations (reference, fast/handwritten, fast/autograd) on
   fixed random batches: every metric of every update and a hash of every parameter after them.
   The autograd formulation is only reachable from the CLI with --compile, hence this part.
Cross-version resume (optional): `--make-legacy DIR` at an OLD commit that has the final state
(bbaa792 or later) leaves a "fast" run killed just before its final state, i.e. its last periodic
checkpoint in that commit's format; `--resume-legacy DIR` at the NEW commit resumes it and
records its scalars under "legacy-resume", which must equal the uninterrupted "fast" run's (so
that output is not diffed against a plain one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
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
    # A kill point makes the trainer SIGKILL itself; a tree without kill points finishes.
    if done.returncode not in ((0, -signal.SIGKILL) if env else (0,)):
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


KILL_BEFORE_FINAL_STATE = {"SACBENCH_TEST_KILL_AT": "before-final-state"}


def checkpoint_state(run_dir: Path) -> dict:
    import torch

    # Our own file, written a moment ago, in whichever layout the tree writes (numpy arrays
    # inside before checkpoint format 2).
    return torch.load(run_dir / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)


def run_record(repo: Path, run_dir: Path, flags: list[str]) -> dict:
    """Train (stopped before the final state where the tree has one), record, then finish."""
    trainer(repo, run_dir, flags, **KILL_BEFORE_FINAL_STATE)
    state = checkpoint_state(run_dir)
    learner = {key: value for key, value in state["learner"].items() if key != "last"}
    record = {
        "scalars": scalars(run_dir),
        "checkpoint_step": state["global_step"],
        "checkpoint_learner": tensor_hashes(learner),
    }
    if not (run_dir / "complete.json").exists():
        trainer(repo, run_dir, flags)
        assert scalars(run_dir) == record["scalars"], f"{run_dir}: the resume changed the scalars"
    record["complete_global_step"] = json.loads((run_dir / "complete.json").read_text())[
        "global_step"
    ]
    return record


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


def make_legacy(repo: Path, run_dir: Path) -> None:
    trainer(repo, run_dir, RUNS["fast"], **KILL_BEFORE_FINAL_STATE)
    if (run_dir / "complete.json").exists():
        raise SystemExit(
            f"{repo} finished the run: it predates SACBENCH_TEST_KILL_AT (the final state, "
            "bbaa792), so its runs leave no checkpoint to resume; use a later commit"
        )
    state = checkpoint_state(run_dir)
    print(f"{run_dir}: checkpoint at step {state['global_step']}, format {state.get('format', 1)}")


def resume_legacy(repo: Path, run_dir: Path) -> dict:
    """Finish the run --make-legacy left (in another tree's checkpoint format) with this tree."""
    legacy = checkpoint_state(run_dir)
    assert not (run_dir / "complete.json").exists(), f"{run_dir} is finished already"
    trainer(repo, run_dir, RUNS["fast"])
    return {
        "resumed_from": {"step": legacy["global_step"], "format": legacy.get("format", 1)},
        "now_format": checkpoint_state(run_dir).get("format", 1),
        "scalars": scalars(run_dir),
    }


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
        make_legacy(repo, options.make_legacy)
        return
    record: dict = {}
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as scratch:
        runs = {"quick": QUICK} if options.quick else RUNS
        for name, flags in runs.items():
            record[name] = run_record(repo, Path(scratch) / name, flags)
    if options.resume_legacy:
        record["legacy-resume"] = resume_legacy(repo, options.resume_legacy)
        assert record["legacy-resume"]["scalars"] == record["fast"]["scalars"], "resume differs"
    record["formulations"] = formulations()
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if options.out:
        options.out.write_text(text)
    print(f"{len(record)} records, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()

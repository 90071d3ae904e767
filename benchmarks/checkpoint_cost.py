"""Size and time of a trainer checkpoint's replay buffer at 1M transitions.

    python benchmarks/checkpoint_cost.py [--transitions 1000000] [--interval 10000]

For HalfCheetah-v4 and Humanoid-v4 shapes, compares in one run:
- a naive snapshot (obs, next_obs, action, reward, termination as float32 in one file), and
- sacbench's checkpoint: incremental chunks without repeated next_obs. Its cost per checkpoint
  is one interval's rows; the table also shows the worst case, all rows in one chunk (what a
  checkpoint interval as long as the run would write), and the time to load every chunk back.
Episodes are 1000 steps, as in these tasks' time limit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sacbench.training.envs import env_spaces
from sacbench.training.replay import ReplayBuffer
from sacbench.training.run_dir import RunDir


def filled_buffer(*, transitions: int, obs_dim: int, action_dim: int) -> ReplayBuffer:
    buffer = ReplayBuffer(capacity=transitions, obs_dim=obs_dim, action_dim=action_dim, seed=0)
    generator = torch.Generator().manual_seed(0)
    observations = torch.randn(transitions + 1, obs_dim, generator=generator)
    episode_end = torch.zeros(transitions, dtype=torch.bool)
    episode_end[999::1000] = True
    next_observations = observations[1:].clone()
    # At an episode end the next row starts a new episode: its obs is not this row's next_obs.
    next_observations[episode_end] = torch.randn(
        int(episode_end.sum()), obs_dim, generator=generator
    )
    o, a = obs_dim, action_dim
    storage = buffer.storage
    storage[:, :o] = observations[:-1]
    storage[:, o : 2 * o] = next_observations
    storage[:, 2 * o : 2 * o + a] = torch.rand(transitions, a, generator=generator)
    storage[:, 2 * o + a] = torch.randn(transitions, generator=generator)
    storage[:, 2 * o + a + 1] = 0.0
    buffer.added = transitions
    return buffer


def naive_snapshot(buffer: ReplayBuffer, path: Path) -> None:
    with open(path, "wb") as handle:
        np.save(handle, buffer.storage.numpy())
        handle.flush()
        os.fsync(handle.fileno())


def measure(env_id: str, *, transitions: int, interval: int, workdir: Path) -> dict[str, float]:
    spaces = env_spaces(env_id)
    obs_dim, action_dim = spaces.observation_size, spaces.action_size
    buffer = filled_buffer(transitions=transitions, obs_dim=obs_dim, action_dim=action_dim)

    naive = workdir / f"{env_id}-naive.npy"
    started = time.perf_counter()
    naive_snapshot(buffer, naive)
    naive_seconds = time.perf_counter() - started
    naive_bytes = naive.stat().st_size
    naive.unlink()

    run_dir = RunDir(workdir / env_id)
    run_dir.checkpoint_dir.mkdir(parents=True)
    added = buffer.added
    # One regular checkpoint: rows of the last interval only.
    buffer.added = added - interval
    run_dir.save_checkpoint({"global_step": buffer.added}, buffer=buffer)  # all earlier rows
    buffer.added = added
    started = time.perf_counter()
    run_dir.save_checkpoint({"global_step": added}, buffer=buffer)
    interval_seconds = time.perf_counter() - started
    chunk_sizes = sorted(p.stat().st_size for p in run_dir.checkpoint_dir.glob("rows-*.npz"))
    interval_bytes = chunk_sizes[0]

    started = time.perf_counter()
    restored = ReplayBuffer(capacity=transitions, obs_dim=obs_dim, action_dim=action_dim, seed=0)
    fresh = RunDir(workdir / env_id)
    fresh.load_buffer(restored, fresh.load_checkpoint())
    load_seconds = time.perf_counter() - started
    assert torch.equal(restored.storage, buffer.storage), "restored buffer differs"

    for path in run_dir.checkpoint_dir.glob("*"):
        path.unlink()
    started = time.perf_counter()
    run_dir._buffer_cache = None
    run_dir.save_checkpoint({"global_step": added}, buffer=buffer)
    full_seconds = time.perf_counter() - started
    full_bytes = sum(p.stat().st_size for p in run_dir.checkpoint_dir.glob("rows-*.npz"))
    for path in run_dir.checkpoint_dir.glob("*"):
        path.unlink()
    return {
        "buffer_gb": buffer.nbytes() / 1e9,
        "naive_gb": naive_bytes / 1e9,
        "naive_s": naive_seconds,
        "full_gb": full_bytes / 1e9,
        "full_s": full_seconds,
        "interval_mb": interval_bytes / 1e6,
        "interval_s": interval_seconds,
        "load_s": load_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--interval", type=int, default=10_000)
    parser.add_argument("--env-ids", nargs="+", default=["HalfCheetah-v4", "Humanoid-v4"])
    options = parser.parse_args()
    print(f"{options.transitions:,} transitions, checkpoint interval {options.interval:,} steps")
    header = ("env", "buffer GB", "naive GB", "naive s", "all-rows GB", "all-rows s",
              "per-interval MB", "per-interval s", "load s", "size ratio")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        for env_id in options.env_ids:
            r = measure(
                env_id,
                transitions=options.transitions,
                interval=options.interval,
                workdir=Path(tmp),
            )
            print(
                f"| {env_id} | {r['buffer_gb']:.2f} | {r['naive_gb']:.2f} | {r['naive_s']:.1f} | "
                f"{r['full_gb']:.2f} | {r['full_s']:.1f} | {r['interval_mb']:.1f} | "
                f"{r['interval_s']:.2f} | {r['load_s']:.1f} | "
                f"{r['naive_gb'] / r['full_gb']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()

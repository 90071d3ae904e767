"""A preallocated float32 replay buffer, sampled field by field, saved incrementally.

Each transition is one row of a single tensor: [obs | next_obs | action | reward | termination].
One row per transition keeps the memory at exactly the float32 size of the stored fields and a
transition's fields together; a sample gathers each field into a dense tensor of its own.

Checkpoints store the buffer as chunks of rows added since the previous checkpoint, so the cost of
one checkpoint grows with the checkpoint interval, not with the buffer size. Inside a chunk a
next_obs equal to the following row's obs (every step but an episode's last) is not written again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sacbench.atomic import write_atomically
from sacbench.sac.algorithm import Batch
from sacbench.training.errors import RunDirError


def zeroed_rows(rows: int, width: int, *, device: str) -> torch.Tensor:
    """A [rows, width] float32 tensor of zeros. On the CPU its pages are the kernel's zeroed pages,
    mapped when a row is first written (np.zeros: calloc): a short run of a large buffer, e.g.
    Humanoid-v4's 1M rows of 2.9 GiB, holds only the rows it wrote, as CleanRL's numpy buffer does.
    torch.zeros would write all of it up front."""
    if torch.device(device).type == "cpu":
        return torch.from_numpy(np.zeros((rows, width), dtype=np.float32))
    return torch.zeros((rows, width), dtype=torch.float32, device=device)


class ReplayBuffer:
    def __init__(
        self, *, capacity: int, obs_dim: int, action_dim: int, seed: int, device: str = "cpu"
    ) -> None:
        for name, value in (
            ("capacity", capacity),
            ("obs_dim", obs_dim),
            ("action_dim", action_dim),
        ):
            if value <= 0:
                raise ValueError(f"ReplayBuffer: {name} must be positive, got {value}")
        self.capacity = capacity
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.row_width = 2 * obs_dim + action_dim + 2
        self.storage = zeroed_rows(capacity, self.row_width, device=device)
        self._columns = self.split(self.storage)  # views of each field's columns, for gather
        self.added = 0  # transitions added since the start; the row is added % capacity
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self._row = np.empty(self.row_width, dtype=np.float32)

    @property
    def size(self) -> int:
        return min(self.added, self.capacity)

    def add(
        self,
        *,
        observation: np.ndarray,
        next_observation: np.ndarray,
        action: np.ndarray,
        reward: float,
        terminated: bool,
    ) -> None:
        o, a = self.obs_dim, self.action_dim
        row = self._row
        row[:o] = observation
        row[o : 2 * o] = next_observation
        row[2 * o : 2 * o + a] = action
        row[2 * o + a] = reward
        row[2 * o + a + 1] = float(terminated)
        self.storage[self.added % self.capacity].copy_(torch.from_numpy(row))
        self.added += 1

    def sample_indices(self, batch_size: int) -> torch.Tensor:
        if self.size == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty")
        indices = self.rng.integers(0, self.size, size=batch_size)
        return torch.from_numpy(indices).to(self.storage.device, non_blocking=True)

    def sample(self, batch_size: int) -> Batch:
        return self.gather(self.sample_indices(batch_size))

    def gather(self, indices: torch.Tensor) -> Batch:
        """The rows at `indices`, each field gathered straight into a dense tensor of its own, as
        the updates read them: gathering whole rows, then copying each field out of them, would
        write every value twice."""
        columns = self._columns
        return Batch(
            observations=columns.observations.index_select(0, indices),
            next_observations=columns.next_observations.index_select(0, indices),
            actions=columns.actions.index_select(0, indices),
            rewards=columns.rewards.index_select(0, indices),
            terminations=columns.terminations.index_select(0, indices),
        )

    def split(self, rows: torch.Tensor) -> Batch:
        o, a = self.obs_dim, self.action_dim
        return Batch(
            observations=rows[:, :o],
            next_observations=rows[:, o : 2 * o],
            actions=rows[:, 2 * o : 2 * o + a],
            rewards=rows[:, 2 * o + a],
            terminations=rows[:, 2 * o + a + 1],
        )

    def nbytes(self) -> int:
        return self.storage.element_size() * self.storage.nelement()

    # ---- checkpointing -------------------------------------------------------------------------

    def save_new_rows(self, directory: Path, *, saved_until: int) -> str | None:
        """Write the rows added since `saved_until` as one chunk file and return its name.

        The file is written atomically: a kill mid-write may leave a stray hidden temporary
        file, never a truncated chunk.
        """
        directory.mkdir(parents=True, exist_ok=True)
        first = max(saved_until, self.added - self.capacity)
        if first >= self.added:
            return None
        name = chunk_name(first, self.added)
        _write_chunk(directory / name, self._rows_between(first, self.added), obs_dim=self.obs_dim)
        return name

    def live_chunks(self, names: list[str]) -> list[str]:
        """The chunks, of those named, that still hold rows of the current buffer contents."""
        oldest_live = self.added - self.capacity
        return [name for name in names if parse_chunk_name(name)[1] > oldest_live]

    def load_chunks(self, directory: Path, names: list[str], *, added: int) -> None:
        self.added = 0
        for name in names:
            first, end = parse_chunk_name(name)
            try:
                rows = _read_chunk(directory / name, obs_dim=self.obs_dim)
            except Exception as error:  # noqa: BLE001 - any damage is reported with the file
                raise RunDirError(
                    f"replay buffer chunk {directory / name} is unreadable: {error}"
                ) from error
            if rows.shape != (end - first, self.row_width):
                raise RunDirError(
                    f"replay buffer chunk {directory / name} has shape {rows.shape}, "
                    f"expected {(end - first, self.row_width)}"
                )
            # Copy in contiguous runs of ring positions (a chunk may wrap around the ring).
            start = first
            while start < end:
                position = start % self.capacity
                stop = min(end, start + self.capacity - position)
                block = torch.from_numpy(rows[start - first : stop - first])
                self.storage[position : position + stop - start].copy_(block)
                start = stop
        self.added = added
        if names and parse_chunk_name(names[-1])[1] != added:
            raise RunDirError(
                f"replay buffer chunks in {directory} end at transition "
                f"{parse_chunk_name(names[-1])[1]}, but the checkpoint holds {added}"
            )

    def _rows_between(self, first: int, end: int) -> np.ndarray:
        positions = torch.arange(first, end) % self.capacity
        return self.storage[positions.to(self.storage.device)].cpu().numpy()


def chunk_problem(path: Path) -> str | None:
    """Why the chunk file at `path` cannot be loaded (missing, damaged, or holding another number
    of rows than its name says), or None. Reading it checks every array's zip checksum."""
    if not path.is_file():
        return f"replay buffer chunk {path} is missing"
    first, end = parse_chunk_name(path.name)
    try:
        with np.load(path) as archive:
            rows = archive["rows_without_next_obs"].shape[0]
            kept, kept_index = archive["kept_next_obs"], archive["kept_next_obs_index"]
    except Exception as error:  # noqa: BLE001 - any damage is reported with the file
        return f"replay buffer chunk {path} is unreadable ({type(error).__name__}: {error})"
    if rows != end - first or len(kept) != len(kept_index):
        return f"replay buffer chunk {path} holds {rows} rows, its name says {end - first}"
    return None


def chunk_name(first: int, end: int) -> str:
    return f"rows-{first:012d}-{end:012d}.npz"


def parse_chunk_name(name: str) -> tuple[int, int]:
    stem = name.removesuffix(".npz")
    _, first, end = stem.split("-")
    return int(first), int(end)


def _write_chunk(path: Path, rows: np.ndarray, *, obs_dim: int) -> None:
    observations = rows[:, :obs_dim]
    next_observations = rows[:, obs_dim : 2 * obs_dim]
    # next_obs[i] is usually obs[i + 1]; keep it only where it is not (episode ends, last row).
    repeated = np.zeros(len(rows), dtype=bool)
    repeated[:-1] = np.all(next_observations[:-1] == observations[1:], axis=1)
    arrays = {
        "rows_without_next_obs": np.concatenate([observations, rows[:, 2 * obs_dim :]], axis=1),
        "kept_next_obs_index": np.flatnonzero(~repeated),
        "kept_next_obs": next_observations[~repeated],
    }
    write_atomically(path, lambda handle: np.savez(handle, **arrays))


def _read_chunk(path: Path, *, obs_dim: int) -> np.ndarray:
    with np.load(path) as archive:
        compact = archive["rows_without_next_obs"]
        kept_index = archive["kept_next_obs_index"]
        kept = archive["kept_next_obs"]
    observations = compact[:, :obs_dim]
    next_observations = np.empty_like(observations)
    next_observations[:-1] = observations[1:]
    next_observations[kept_index] = kept
    return np.concatenate([observations, next_observations, compact[:, obs_dim:]], axis=1)

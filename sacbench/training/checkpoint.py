"""The checkpoint file, checkpoint/state.pt: how it is written and read (format: docs/contracts.md).

RunDir decides what goes in it and when; this module only owns the file, so that a change of
format touches one place. The rest of the trainer sees one in-memory layout whatever the file's
format: the observation as a numpy array, numpy's global RNG state as np.random.get_state()'s
tuple.

The file is read with torch.load(weights_only=True): it may hold tensors, numbers, strings,
bytes and containers of them, and nothing that unpickling could run. Format 2 (written now)
stores the observation as a tensor and numpy's RNG state as a dict of a tensor and numbers.
Format 1 (every sacbench before format 2; no "format" key) stored both as numpy arrays:
such a file, left by a run still in flight, is read with exactly the numpy array
reconstructors it needs allowed (LEGACY_NUMPY_GLOBALS), so that the run resumes.

The MuJoCo state inside (env.mj_data) is a pickled blob of bytes to torch.load; envs.py
unpickles it with its own allow-list (see capture_env_state for why it is a pickle).
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sacbench.atomic import write_atomically
from sacbench.training.errors import RunDirError

FORMAT = 2
LEGACY_FORMAT = 1  # the format of files without a "format" key

# What a format-1 file's numpy arrays (the observation, the MT19937 key) need to be rebuilt, and
# nothing else: torch.load refuses every other global.
LEGACY_NUMPY_GLOBALS = (
    np._core.multiarray._reconstruct,
    np.ndarray,
    np.dtype,
    np.dtypes.UInt32DType,
    np.dtypes.Float32DType,
)


def write_state(path: Path, state: dict[str, Any], *, previous: Path | None = None) -> None:
    """Write `state` atomically; the folder is synced too, since the chunks it names live there.

    With `previous`, the file that `path` held is kept there (renamed once the new state is on
    disk), so that a damaged newest checkpoint still leaves the one before it to resume from.
    """
    on_disk = _to_disk(state)

    def keep_previous() -> None:
        if previous is not None and path.exists():
            os.replace(path, previous)

    write_atomically(
        path,
        lambda handle: torch.save(on_disk, handle),
        sync_directory=True,
        before_replace=keep_previous,
    )


def load_state(path: Path) -> dict[str, Any]:
    """The state at `path`, in the in-memory layout; RunDirError (naming the file) when it is
    damaged, holds anything a checkpoint never holds, or is not ours."""
    _check_checksums(path)
    try:
        with torch.serialization.safe_globals(list(LEGACY_NUMPY_GLOBALS)):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise RunDirError(
            f"checkpoint {path} cannot be loaded: {_refusal(path, error)}; it was not unpickled. "
            "Nothing was deleted - move it away to start this run afresh"
        ) from error
    except Exception as error:  # noqa: BLE001 - report any damage with the file's name
        raise RunDirError(
            f"checkpoint {path} cannot be loaded ({type(error).__name__}: {error}); "
            "nothing was deleted - move it away to start this run afresh"
        ) from error
    if not isinstance(state, dict) or "global_step" not in state or "buffer" not in state:
        raise RunDirError(f"checkpoint {path} is not a sacbench checkpoint")
    file_format = state.pop("format", LEGACY_FORMAT)
    if file_format not in (LEGACY_FORMAT, FORMAT):
        raise RunDirError(
            f"checkpoint {path} has format {file_format!r}; this sacbench reads formats "
            f"{LEGACY_FORMAT} and {FORMAT} (a newer sacbench wrote it?)"
        )
    return _from_disk(state)


def _check_checksums(path: Path) -> None:
    """torch.save writes a zip archive with a CRC-32 per record, which torch.load does not
    check: a flipped byte inside a tensor loads as a wrong weight. Check them all first."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise RunDirError(
            f"checkpoint {path} cannot be loaded: it is damaged ({error}); nothing was deleted - "
            "move it away to start this run afresh"
        ) from error
    if damaged is not None:
        raise RunDirError(
            f"checkpoint {path} cannot be loaded: its record {damaged} fails its checksum (the "
            "file is damaged); nothing was deleted - move it away to start this run afresh"
        )


def _refusal(path: Path, error: pickle.UnpicklingError) -> str:
    """What torch's weights-only unpickler refused, without its advice to load unsafely."""
    allowed = {f"{item.__module__}.{item.__qualname__}" for item in LEGACY_NUMPY_GLOBALS}
    try:  # reads the pickle's opcodes; runs nothing
        named = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path))) - allowed
    except Exception:  # noqa: BLE001 - the refusal itself is what gets reported
        named = set()
    if named:
        return f"it names {', '.join(sorted(named))}, which a sacbench checkpoint never holds"
    # Keep torch's reason, drop its paragraphs about loading with weights_only=False.
    reason = " ".join(
        paragraph.strip()
        for paragraph in str(error).split("\n\n")
        if not any(word in paragraph for word in ("weights_only", "documentation"))
    ).strip()
    return f"it is damaged or holds what a sacbench checkpoint never holds ({reason or error!r})"


def _to_disk(state: dict[str, Any]) -> dict[str, Any]:
    on_disk = {**state, "format": FORMAT}
    if "observation" in state:
        # A copy: the bytes are the array's, whatever its strides.
        on_disk["observation"] = torch.from_numpy(np.array(state["observation"], copy=True))
    if "rng" in state:
        algorithm, key, position, has_gauss, cached_gaussian = state["rng"]["numpy"]
        on_disk["rng"] = {
            **state["rng"],
            "numpy": {
                "algorithm": str(algorithm),
                "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),  # exact for uint32
                "pos": int(position),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached_gaussian),
            },
        }
    return on_disk


def _from_disk(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2's tensors back to numpy; format 1 already holds numpy arrays."""
    if isinstance(state.get("observation"), torch.Tensor):
        state["observation"] = state["observation"].numpy()
    numpy_rng = state.get("rng", {}).get("numpy")
    if isinstance(numpy_rng, dict):
        state["rng"]["numpy"] = (
            numpy_rng["algorithm"],
            numpy_rng["key"].numpy().astype(np.uint32),
            numpy_rng["pos"],
            numpy_rng["has_gauss"],
            numpy_rng["cached_gaussian"],
        )
    return state

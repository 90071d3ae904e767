"""The checkpoint file, checkpoint/state.pt: how it is written and read (format: docs/contracts.md).

RunDir decides what goes in it and when; this module only owns the file, so that a change of
format touches one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from sacbench.atomic import write_atomically
from sacbench.training.errors import RunDirError


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write `state` atomically; the folder is synced too, since the chunks it names live there."""
    write_atomically(path, lambda handle: torch.save(state, handle), sync_directory=True)


def load_state(path: Path) -> dict[str, Any]:
    """The state at `path`; RunDirError (naming the file) when it is damaged or not ours."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001 - report any damage with the file's name
        raise RunDirError(
            f"checkpoint {path} cannot be loaded ({type(error).__name__}: {error}); "
            "nothing was deleted - move it away to start this run afresh"
        ) from error
    if not isinstance(state, dict) or "global_step" not in state or "buffer" not in state:
        raise RunDirError(f"checkpoint {path} is not a sacbench checkpoint")
    return state

"""The one way sacbench replaces a file: a reader, or a job killed part-way, sees the old file or
the new one, never half of one. Results, run records and checkpoints all go through it."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# Bytes or text to write, or a function that streams into the open file (torch.save, np.savez).
Content = str | bytes | Callable[[BinaryIO], None]


def new_file_mode() -> int:
    """The mode a plain open() gives a new file. mkstemp's 0o600 would hide results and run
    records from the rest of a group sharing a results folder."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: Path, content: Content, *, sync_directory: bool = False) -> None:
    """Write a temporary file beside `path`, fsync it and rename it over `path`.

    With `sync_directory` the folder is fsynced too, so that the rename itself survives a crash;
    a checkpoint needs that, a table that can be rendered again does not.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode() if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, new_file_mode())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if sync_directory:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def write_json_atomically(path: Path, payload: Any) -> None:
    write_atomically(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")

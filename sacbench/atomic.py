"""The one way sacbench replaces a file: a reader, or a job killed part-way, sees the old file or
the new one, never half of one. Results, run records and checkpoints all go through it."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# Bytes or text to write, or a function that streams into the open file (torch.save, np.savez).
Content = str | bytes | Callable[[BinaryIO], None]
# The errno values of a full device (ENOSPC) or a full quota (EDQUOT).
FULL_DEVICE = frozenset({errno.ENOSPC, errno.EDQUOT})


class DeviceFullError(OSError):
    """A write that failed because the device (or the quota) holding the file is full. The
    message names the file; the file itself was not replaced, so its previous version stays.
    torch.save reports a full device as "[enforce fail at inline_container.cc] unexpected pos",
    with the OSError only as its context: this error says what happened instead."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            errno.ENOSPC,
            f"cannot write {path}: the device holding {path.parent} is full (no space left on "
            f"device); {path.name} was not replaced",
            str(path),
        )

    def __str__(self) -> str:
        return self.strerror or ""


def device_was_full(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from or during, is a full device's."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_DEVICE:
            return True
        current = current.__cause__ or current.__context__
    return False


def new_file_mode() -> int:
    """The mode a plain open() gives a new file. mkstemp's 0o600 would hide results and run
    records from the rest of a group sharing a results folder."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(
    path: Path,
    content: Content,
    *,
    sync_directory: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write a temporary file beside `path`, fsync it and rename it over `path`.

    With `sync_directory` the folder is fsynced too, so that the rename itself survives a crash;
    a checkpoint needs that, a table that can be rendered again does not. `before_replace` runs
    once the new content is safely on disk, just before the rename (a checkpoint keeps its
    previous version there). A full device raises DeviceFullError, naming `path`.
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
        if before_replace is not None:
            before_replace()
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if device_was_full(error) and not isinstance(error, DeviceFullError):
            raise DeviceFullError(path) from error
        raise
    if sync_directory:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def write_json_atomically(path: Path, payload: Any) -> None:
    write_atomically(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")

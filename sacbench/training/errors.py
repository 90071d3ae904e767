"""The training layer's errors, in one place so that every module below the loop can raise them."""

import errno


class RunDirError(RuntimeError):
    """A run directory that cannot be trained into as asked (its checkpoint or replay buffer
    chunks included); the message says why and names the file."""


# Plain words for the errno values a run dir meets most (OSError's own strerror otherwise).
_WHY = {
    "EROFS": "the file system is read-only",
    "ENOSPC": "the device is full (no space left on device)",
    "EDQUOT": "the disk quota is used up",
    "EACCES": "permission denied",
    "EISDIR": "it is a folder, not a file",
    "ENOTDIR": "a part of the path is a file, not a folder",
}


def describe_error(error: BaseException) -> str:
    """An error as the trainer's command line reports it: a file system error as the file and
    what went wrong, in words (no traceback), anything else as its message."""
    if not isinstance(error, OSError) or type(error).__str__ is not OSError.__str__:
        return str(error)
    name = errno.errorcode.get(error.errno or 0, "")
    why = _WHY.get(name, error.strerror or str(error))
    where = error.filename if error.filename is not None else "a file"
    return f"cannot use {where}: {why}"

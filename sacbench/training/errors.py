"""The training layer's errors, in one place so that every module below the loop can raise them."""


class RunDirError(RuntimeError):
    """A run directory that cannot be trained into as asked; the message says why and where."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded; the message names the file."""

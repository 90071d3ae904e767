"""The training layer's errors, in one place so that every module below the loop can raise them."""


class RunDirError(RuntimeError):
    """A run directory that cannot be trained into as asked (its checkpoint or replay buffer
    chunks included); the message says why and names the file."""

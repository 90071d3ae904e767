"""Stop requests: a signal only marks the run, so that the loop stops at a step boundary."""

from __future__ import annotations

import signal
from typing import Any


class StopRequested:
    """Records SIGTERM/SIGUSR1/SIGINT; the loop checkpoints at the end of the current step."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequested:
        for signal_number in self.SIGNALS:
            self._previous[signal_number] = signal.signal(signal_number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signal_number, handler in self._previous.items():
            signal.signal(signal_number, handler)

    def _handle(self, signal_number: int, frame: object) -> None:
        self.signal_number = signal_number

    @property
    def requested(self) -> bool:
        return self.signal_number is not None

"""Python's cyclic collector paused through the runner's start-up (`rollout_runner.main` says
why). Imported before anything else there, so it imports nothing but `gc`."""

from __future__ import annotations

import gc


class CollectorPause:
    """The cyclic collector off until `resume`, which freezes what was made meanwhile
    (`gc.freeze`: never walked again; turned on without that, the collector's first pass would walk
    all of it at once) and turns the collector on again, only if it was on."""

    def __init__(self) -> None:
        self._collecting = gc.isenabled()
        gc.disable()

    def resume(self) -> None:
        if self._collecting:
            gc.freeze()
            gc.enable()
            self._collecting = False

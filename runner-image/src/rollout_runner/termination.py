"""Writing the termination message, which `rollout.api.wire.termination` defines and renders."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def write(path: Path, data: bytes) -> bool:
    """Write the message; False (and a warning) when the path cannot be written."""
    try:
        path.write_bytes(data)
    except OSError as err:
        log.warning("cannot write the termination message to %s: %s", path, err)
        return False
    return True

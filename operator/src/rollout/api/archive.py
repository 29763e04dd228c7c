"""The task archive: one task directory as a deterministic tar.gz, and what it may hold.

The archive of a task is deterministic (sorted entries, mtime 0, owner 0, modes from the
executable bit alone, gzip without timestamp or name), so the same task gives the same bytes on
any machine with the same zlib, and extracting it gives back a tree with the same content hash.
Names are relative to the task directory; it holds directories, regular files and symbolic links
that stay inside the task, nothing else. `rollout.datasets.bundle` makes archives and
`rollout_runner.archive` extracts them; the rules both follow are here, without any tar code.
"""

from __future__ import annotations

import posixpath

ARCHIVE_LABEL = "task archive"
"""Where problems with an archive are reported (InvalidInput's source)."""

DIRECTORY_MODE = 0o755
EXECUTABLE_MODE = 0o755
FILE_MODE = 0o644
SYMLINK_MODE = 0o777


def link_escapes(link_path: str, target: str) -> bool:
    """True if `target`, read relative to the link's directory, leaves the root."""
    if target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    return resolved == ".." or resolved.startswith("../")

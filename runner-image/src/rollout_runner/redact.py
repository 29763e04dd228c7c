"""Secret scrubbing: agent env values never leave the runner in plain text.

The secrets are the agent env values that come from Kubernetes Secrets (`valueFrom.secretKeyRef`)
and the storage credentials. Literal env values in the job are not secrets: they are in the
RolloutJob for anyone to read, and scrubbing short literals such as `1` or `true` would garble
every log.

Rule: every exact occurrence of a secret value of at least `MIN_SECRET_LENGTH` characters is
replaced by `***` in the runner's own logs, result.json, error.txt, the termination message and
every object uploaded for the trial (setup/ and command/ output, and every file of logs/).
Shorter values are not scrubbed (a 3-character secret would match everywhere and protects
nothing). Only exact occurrences are found: a secret the agent re-encodes (base64, reversed,
split across lines) is not recognised.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

MIN_SECRET_LENGTH = 4
MASK = "***"
_CHUNK = 1024 * 1024


class Redactor:
    """Replaces every known secret value with `***`, in text, bytes and whole files."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted(kept, key=len, reverse=True)
        self._encoded = [s.encode() for s in self._secrets]
        self._longest = max((len(e) for e in self._encoded), default=0)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, MASK)
        return value

    def data(self, value: bytes) -> bytes:
        for secret in self._encoded:
            value = value.replace(secret, MASK.encode())
        return value

    def copy_file(self, source: Path, target: Path) -> None:
        """Copy `source` to `target` with every secret replaced, in bounded memory.

        The last `longest secret - 1` bytes of each chunk are held back until the next chunk
        arrives, so a secret split across two reads is still found.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self._encoded:
            shutil.copyfile(source, target)
            return
        keep = self._longest - 1
        with source.open("rb") as reader, target.open("wb") as writer:
            pending = b""
            while chunk := reader.read(_CHUNK):
                pending = self.data(pending + chunk)
                if len(pending) > keep:
                    writer.write(pending[:-keep])
                    pending = pending[-keep:]
            writer.write(self.data(pending))


class RedactingFilter(logging.Filter):
    """A logging filter that scrubs each record's final message (arguments included)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if self.redactor:
            message = record.getMessage()
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.msg = self.redactor.text(message)
            record.args = None
            if record.exc_text:
                record.exc_text = self.redactor.text(record.exc_text)
        return True

"""Secret scrubbing: agent env values never leave the runner in plain text.

The secrets are the agent env values that come from Kubernetes Secrets (`valueFrom.secretKeyRef`)
and the storage credentials. Literal env values in the job are not secrets: they are in the
RolloutJob for anyone to read, and scrubbing short literals such as `1` or `true` would garble
every log.

Rule: every exact occurrence of a whole secret value of at least `MIN_SECRET_LENGTH` (8)
characters is replaced by `***` in the runner's own logs, result.json, error.txt, the termination
message and every object uploaded for the trial (setup/ and command/ output, and every file of
logs/), except where it lies inside one of the names the project made for the trial (its job,
agent, dataset and task names, its directory and storage URIs): a storage access key `bars` must
not turn the job `bars-smoke` into `***-smoke`. Shorter values are not scrubbed: a 4-character
value would match all over the text and protects nothing (real access keys, tokens and
passwords are longer). Only exact occurrences are found: a secret the agent re-encodes (base64,
reversed, split across lines) is not recognised.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import AnyStr

MIN_SECRET_LENGTH = 8
MASK = "***"
_CHUNK = 1024 * 1024


def _pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    """One alternation of the values, longest first (so a value that contains another wins)."""
    ordered = sorted(set(values), key=len, reverse=True)
    return re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None


def _as_bytes(pattern: re.Pattern[str] | None) -> re.Pattern[bytes] | None:
    return re.compile(pattern.pattern.encode()) if pattern is not None else None


class Redactor:
    """Replaces every known secret value with `***` in text, bytes and whole files, leaving the
    names the project made (`keep`) as they are."""

    def __init__(self, secrets: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        kept_secrets = [s for s in secrets if len(s) >= MIN_SECRET_LENGTH]
        self._secrets = _pattern(kept_secrets)
        self._names = _pattern(n for n in keep if n)
        self._secrets_b = _as_bytes(self._secrets)
        self._names_b = _as_bytes(self._names)
        longest = max(
            (len(v.encode()) for v in [*kept_secrets, *(n for n in keep if n)]), default=0
        )
        self._hold_back = max(longest - 1, 0)

    def __bool__(self) -> bool:
        return self._secrets is not None

    def text(self, value: str) -> str:
        if self._secrets is None:
            return value
        return _redact(value, self._secrets, self._names, MASK)

    def data(self, value: bytes) -> bytes:
        if self._secrets_b is None:
            return value
        return _redact(value, self._secrets_b, self._names_b, MASK.encode())

    def copy_file(self, source: Path, target: Path) -> None:
        """Copy `source` to `target` with every secret replaced, in bounded memory.

        A match (of a secret or of a kept name) is at most `hold_back + 1` bytes long, so every
        match that starts before `len(pending) - hold_back` lies wholly in what has been read.
        What comes before that point is written, moved back to the start of any match that
        straddles it; the rest waits for the next read. So a secret split across two reads is
        still found, and a kept name split across two reads still keeps what is inside it.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        if self._secrets_b is None:
            shutil.copyfile(source, target)
            return
        with source.open("rb") as reader, target.open("wb") as writer:
            pending = b""
            while chunk := reader.read(_CHUNK):
                pending += chunk
                cut = len(pending) - self._hold_back
                masked = _secret_matches(pending, self._secrets_b, self._names_b)
                spans = [m.span() for m in masked]
                if self._names_b is not None:
                    spans += [m.span() for m in self._names_b.finditer(pending)]
                moved = True
                while moved and cut > 0:
                    moved = False
                    for start, end in spans:
                        if start < cut < end:
                            cut, moved = start, True
                if cut <= 0:
                    continue
                done = [m for m in masked if m.end() <= cut]
                writer.write(_masked(pending[:cut], done, MASK.encode()))
                pending = pending[cut:]
            writer.write(self.data(pending))


def _secret_matches(
    value: AnyStr, secrets: re.Pattern[AnyStr], names: re.Pattern[AnyStr] | None
) -> list[re.Match[AnyStr]]:
    """The secret occurrences to mask: those not wholly inside an occurrence of a kept name."""
    kept = [m.span() for m in names.finditer(value)] if names is not None else []
    return [
        match
        for match in secrets.finditer(value)
        if not any(start <= match.start() and match.end() <= end for start, end in kept)
    ]


def _redact(
    value: AnyStr, secrets: re.Pattern[AnyStr], names: re.Pattern[AnyStr] | None, mask: AnyStr
) -> AnyStr:
    return _masked(value, _secret_matches(value, secrets, names), mask)


def _masked(value: AnyStr, matches: Iterable[re.Match[AnyStr]], mask: AnyStr) -> AnyStr:
    pieces: list[AnyStr] = []
    position = 0
    for match in matches:
        pieces += [value[position : match.start()], mask]
        position = match.end()
    pieces.append(value[position:])
    return value[:0].join(pieces)


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

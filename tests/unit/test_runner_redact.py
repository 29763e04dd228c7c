"""Scrubbing secret values from text, bytes, files and log records."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from rollout_runner.redact import MASK, MIN_SECRET_LENGTH, RedactingFilter, Redactor

SECRET = "sk-live-0123456789"


def test_every_occurrence_is_replaced() -> None:
    redactor = Redactor([SECRET])
    assert redactor.text(f"a{SECRET}b{SECRET}") == "a***b***"
    assert redactor.data(f"key={SECRET}\n".encode()) == b"key=***\n"


def test_values_shorter_than_eight_characters_are_not_secrets() -> None:
    redactor = Redactor(["bars", "true", "abcdefg", "", "abcdefgh"])
    assert redactor.text("bars is true, abcdefg but abcdefgh") == "bars is true, abcdefg but ***"
    assert not Redactor(["bars", "1234567"])
    assert MIN_SECRET_LENGTH == 8


def test_a_secret_inside_another_is_replaced_whole() -> None:
    redactor = Redactor(["abcdefgh", "xxabcdefghxx"])
    assert redactor.text("xxabcdefghxx abcdefgh") == "*** ***"


def test_names_the_project_made_are_never_rewritten() -> None:
    """An access key that is part of the job's name leaves the name alone, not its uses."""
    key = "bars-smoke-key"
    job = "team-bars-smoke-key-nightly"
    redactor = Redactor([key], keep=[job, f"{job}/oracle/set/hello__1"])
    text = f"Trial: {job}/oracle/set/hello__1\nthe agent printed {key} and AWS_KEY={key}"
    assert redactor.text(text) == (
        f"Trial: {job}/oracle/set/hello__1\nthe agent printed *** and AWS_KEY=***"
    )
    assert redactor.data(text.encode()) == redactor.text(text).encode()
    # A secret that reaches past a kept name is still a secret there.
    assert Redactor([key], keep=["team-bars"]).text("team-bars-smoke-key") == "team-***"


@pytest.mark.parametrize("offset", [0, 1, 7, 1024 * 1024 - 5, 1024 * 1024 - 20, 1024 * 1024 - 30])
def test_a_kept_name_split_across_two_reads_keeps_the_secret_inside_it(
    tmp_path: Path, offset: int
) -> None:
    key = "bars-smoke-key"
    job = "team-bars-smoke-key-nightly"
    data = b"x" * offset + job.encode() + b" uses " + key.encode() + b"\n"
    source, target = tmp_path / "in", tmp_path / "out"
    source.write_bytes(data)
    Redactor([key], keep=[job]).copy_file(source, target)
    assert target.read_bytes() == b"x" * offset + job.encode() + b" uses ***\n"


@pytest.mark.parametrize("offset", [0, 1, 5, 17, 1024 * 1024 - 3, 1024 * 1024 - 17])
def test_a_file_is_scrubbed_even_where_a_secret_spans_two_reads(
    tmp_path: Path, offset: int
) -> None:
    data = b"x" * offset + SECRET.encode() + b"y" * 100 + SECRET.encode()
    source, target = tmp_path / "in", tmp_path / "sub" / "out"
    source.write_bytes(data)
    Redactor([SECRET]).copy_file(source, target)
    assert target.read_bytes() == b"x" * offset + MASK.encode() + b"y" * 100 + MASK.encode()


def test_a_file_without_secrets_is_copied_as_is(tmp_path: Path) -> None:
    (tmp_path / "in").write_bytes(b"\x00\xff data")
    Redactor().copy_file(tmp_path / "in", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"\x00\xff data"


def test_log_records_are_scrubbed_arguments_and_tracebacks_included() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(Redactor([SECRET])))
    logger = logging.getLogger("test_runner_redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("the key is %s", SECRET)
        try:
            raise ValueError(f"bad key {SECRET}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert SECRET not in output
    assert "the key is ***" in output
    assert "ValueError: bad key ***" in output

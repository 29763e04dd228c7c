"""The build Pod's report: within a termination message's 4096 bytes whatever the log, the end of
the log kept, read back as written; the pushed digest as each builder leaves it; the log's tail."""

from __future__ import annotations

import json

import pytest

from rollout.api.wire.build import (
    MAX_BYTES,
    TAIL_LINES,
    BuildReport,
    log_tail,
    parse_report,
    pushed_digest,
    render_report,
)

DIGEST = "sha256:" + "0123456789abcdef" * 4
LOG_URI = "s3://evals/team-a/jobs/nightly/builds/" + "ab" * 32 + ".log"


def full_report(tail: str) -> BuildReport:
    return BuildReport(
        exit_code=1,
        timed_out=False,
        digest=None,
        log_tail=tail,
        log_uri=LOG_URI,
        upload_error="the bucket said no: AccessDenied",
        build_sec=12.5,
    )


def compact(report: BuildReport) -> bytes:
    """The report as compact UTF-8 JSON, uncut."""
    text = json.dumps(report.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)
    return text.encode()


def kept_tail(rendered: bytes) -> str:
    """The tail as the operator will read it back."""
    report = parse_report(rendered.decode("utf-8"))
    assert report is not None
    return report.log_tail


# --- render_report --------------------------------------------------------------------------------


def test_a_small_report_round_trips_unchanged() -> None:
    report = BuildReport(
        exit_code=0,
        digest=DIGEST,
        log_tail="#5 pushing manifest\n#5 DONE 0.3s",
        log_uri=LOG_URI,
        build_sec=41.25,
    )
    rendered = render_report(report)
    assert parse_report(rendered.decode()) == report
    # Compact and in the file spelling (snake_case), as the runner writes it.
    data = json.loads(rendered)
    assert data["exit_code"] == 0
    assert data["digest"] == DIGEST
    assert b": " not in rendered


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("ERROR: failed to solve: process did not complete", id="ascii"),
        pytest.param("échec de l'étape RUN: données illisibles", id="latin-accents"),
        pytest.param("构建失败, 无法下载依赖包", id="cjk-3-byte"),
        pytest.param("🙂🚀 emoji build step 💥", id="emoji-4-byte"),
        pytest.param('quote " backslash \\ tab \t bell \x07', id="json-escapes"),
    ],
)
def test_a_huge_log_tail_is_cut_to_fit_and_keeps_its_end(line: str) -> None:
    lines = [f"{n:06d} {line}" for n in range(20_000)]
    tail = "\n".join(lines)
    report = full_report(tail)
    rendered = render_report(report)
    assert len(rendered) <= MAX_BYTES
    rendered.decode("utf-8")  # never a multi-byte character cut in half
    kept = kept_tail(rendered)
    # The newest lines survive, the oldest go; the cut is marked.
    assert kept.startswith("...")
    assert tail.endswith(kept[3:])
    assert kept.endswith(lines[-1])
    assert lines[0] not in kept
    # As much of the tail as fits is kept: one more character would not fit.
    one_more = "..." + tail[-(len(kept) - 3 + 1) :]
    assert len(compact(report.model_copy(update={"log_tail": one_more}))) > MAX_BYTES
    # The rest of the report is untouched by the cut.
    again = parse_report(rendered.decode())
    assert again is not None
    assert again.model_dump(exclude={"log_tail"}) == report.model_dump(exclude={"log_tail"})


def test_the_cut_is_as_long_as_fits_exactly() -> None:
    tail = "x" * 10_000
    rendered = render_report(BuildReport(exit_code=2, log_tail=tail))
    assert len(rendered) == MAX_BYTES  # one-byte characters: the limit is met exactly
    assert kept_tail(rendered) == "..." + "x" * (len(kept_tail(rendered)) - 3)


def test_a_tail_of_four_byte_characters_is_cut_on_a_character() -> None:
    tail = "💥" * 5000  # 20000 bytes
    rendered = render_report(BuildReport(exit_code=2, log_tail=tail))
    assert MAX_BYTES - 4 < len(rendered) <= MAX_BYTES
    kept = kept_tail(rendered)
    assert kept.startswith("...")
    assert set(kept[3:]) == {"💥"}


def test_a_tail_that_fits_is_not_cut() -> None:
    tail = "y" * 3000
    assert kept_tail(render_report(BuildReport(exit_code=1, log_tail=tail))) == tail


def test_a_smaller_limit_is_honoured() -> None:
    rendered = render_report(BuildReport(exit_code=1, log_tail="z" * 1000), limit=200)
    assert len(rendered) <= 200
    assert kept_tail(rendered).endswith("zzz")


def test_a_report_that_cannot_fit_even_without_its_tail_is_refused() -> None:
    report = BuildReport(exit_code=1, upload_error="e" * 500, log_tail="some log")
    with pytest.raises(ValueError, match="cannot fit in 100 bytes"):
        render_report(report, limit=100)


# --- parse_report ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "not json at all",
        "null",
        "[]",
        '"a string"',
        "42",
        '{"exit_code": "two"}',
        '{"exit_code": 0, "surprise": true}',
        '{"build_sec": -1}',
        '{"exit_code": 0, "digest": "sha256:ab',  # cut by a kubelet keeping the wrong end
    ],
)
def test_what_is_not_a_report_reads_as_none(text: str | None) -> None:
    assert parse_report(text) is None


def test_a_report_with_defaults_only_parses() -> None:
    report = parse_report('{"exit_code": 3}')
    assert report == BuildReport(exit_code=3)
    assert report is not None
    assert not report.succeeded


@pytest.mark.parametrize(
    ("report", "succeeded"),
    [
        (BuildReport(exit_code=0, digest=DIGEST), True),
        (BuildReport(exit_code=0, digest=None), False),
        (BuildReport(exit_code=1, digest=DIGEST), False),
        (BuildReport(exit_code=0, digest=DIGEST, timed_out=True), False),
        (BuildReport(exit_code=None, timed_out=True), False),
    ],
)
def test_a_build_succeeded_only_with_exit_0_a_digest_and_in_time(
    report: BuildReport, succeeded: bool
) -> None:
    assert report.succeeded is succeeded


# --- pushed_digest --------------------------------------------------------------------------------


def test_buildahs_digest_file_is_read_with_its_trailing_newline() -> None:
    assert pushed_digest(DIGEST + "\n", None) == DIGEST
    assert pushed_digest(f"  {DIGEST}\r\n", None) == DIGEST


def test_buildkits_metadata_file_is_read() -> None:
    metadata = {
        "buildx.build.ref": "builder/builder0/abc",
        "containerimage.config.digest": "sha256:" + "f" * 64,
        "containerimage.descriptor": {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": DIGEST,
            "size": 1234,
        },
        "containerimage.digest": DIGEST,
        "image.name": "registry.local:5000/rollout-env:" + "ab" * 32,
    }
    assert pushed_digest(None, json.dumps(metadata, indent=2)) == DIGEST


def test_the_digest_file_is_read_before_the_metadata() -> None:
    other = "sha256:" + "e" * 64
    metadata = json.dumps({"containerimage.digest": other})
    assert pushed_digest(DIGEST, metadata) == DIGEST
    assert pushed_digest("garbage", metadata) == other  # an unreadable digest file is skipped


@pytest.mark.parametrize(
    "digest_file",
    [
        "",
        "sha256:abc",
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 65,
        "SHA256:" + "0" * 64,
        "sha256:" + "A" * 64,
        "sha512:" + "0" * 128,
        "0" * 64,
        f"{DIGEST} {DIGEST}",
        f"registry.local/x@{DIGEST}",
    ],
)
def test_a_digest_file_without_a_sha256_digest_gives_none(digest_file: str) -> None:
    assert pushed_digest(digest_file, None) is None


@pytest.mark.parametrize(
    "metadata",
    [
        "",
        "{not json",
        "[]",
        '"sha256:' + "0" * 64 + '"',
        "{}",
        json.dumps({"containerimage.digest": 12}),
        json.dumps({"containerimage.digest": None}),
        json.dumps({"containerimage.digest": "sha256:short"}),
        json.dumps({"containerimage.digest": DIGEST + "\n"}),
        json.dumps({"containerimage.descriptor": {"digest": DIGEST}}),
    ],
)
def test_metadata_without_a_digest_gives_none(metadata: str) -> None:
    assert pushed_digest(None, metadata) is None


def test_no_files_give_no_digest() -> None:
    assert pushed_digest(None, None) is None


# --- log_tail -------------------------------------------------------------------------------------


def test_the_tail_is_the_last_lines_without_the_final_newline() -> None:
    log = "".join(f"step {n}\n" for n in range(1, 101))
    tail = log_tail(log)
    assert tail.splitlines() == [f"step {n}" for n in range(101 - TAIL_LINES, 101)]
    assert not tail.endswith("\n")
    assert log_tail(log, lines=2) == "step 99\nstep 100"


def test_a_short_log_is_its_own_tail() -> None:
    assert log_tail("one\ntwo\n") == "one\ntwo"
    assert log_tail("no newline at all") == "no newline at all"
    assert log_tail("") == ""
    assert log_tail("\n\n\n") == ""


def test_blank_lines_inside_the_tail_are_kept() -> None:
    assert log_tail("a\n\nb\n\n\n", lines=3) == "a\n\nb"

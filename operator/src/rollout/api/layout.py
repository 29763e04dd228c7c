"""Where results and datasets live: object storage keys and the local download directory.

The seed's layout, under an optional prefix in the bucket:

    <prefix>/jobs/<job>/config.json                       job.yaml as JSON
    <prefix>/jobs/<job>/result.json                       the job's result
    <prefix>/jobs/<job>/builds/<image hash>.log           the log of an image build the job's
                                                          trials waited for (in-cluster builds)
    <prefix>/jobs/<job>/<agent>/<dataset>/<task>__<n>/    one trial: result.json, error.txt,
                                                          setup/, command/, logs/
        .../<task>__<n>/retries/<k>/                      the files of its try k, when a lost Pod
                                                          made the operator run it again (k = 1
                                                          for the first Pod); the final try's
                                                          files are at the seed's paths above
    <prefix>/datasets/<manifest digest>.json              a dataset bundle's manifest
    <prefix>/tasks/<content hash>.tar.gz                  one task's files
    <prefix>/environments/<environment hash>.tar.gz       one task's environment/ alone: the
                                                          context of an in-cluster image build

The CLI downloads a job to `<jobs_dir>/<job>/` with the same relative layout; `trial_path` is the
one definition of a trial's place under its job, used for keys and for local paths alike.

Keys never start with a slash and never hold an empty, "." or ".." segment. Prefixes (the values
of `job_prefix`, `trial_prefix`) end with a slash, so listing `jobs/a/` never also lists
`jobs/ab/`. Names used as path components (job, agent, dataset, task) are checked: one that could
escape its directory is a ValueError, never a silently rewritten path. A name too long for a file
name (over 255 bytes) is cut and given a hash of the whole name (`rollout.api.trials.file_name`),
the same in storage and on disk; every other name is used as it is.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from rollout.api.trials import file_name, trial_dir_name

CONFIG_JSON = "config.json"
RESULT_JSON = "result.json"
ERROR_TXT = "error.txt"
SETUP_STDOUT = "setup/stdout.txt"
SETUP_STDERR = "setup/stderr.txt"
COMMAND_STDOUT = "command/stdout.txt"
COMMAND_STDERR = "command/stderr.txt"
LOGS_DIR = "logs"
"""The trial's copy of the container's /logs (logs/agent/, logs/verifier/reward.txt, ...)."""
RETRIES_DIR = "retries"
"""Under a trial's prefix: the files of its earlier tries, `retries/<k>/` each."""


def check_component(value: str, what: str = "name") -> str:
    """`value` if it is safe as one path segment (a job, agent, dataset or task name).

    Refused: empty, "." or "..", a slash or backslash (which would make more than one segment on
    some system), and NUL.
    """
    if value in ("", ".", ".."):
        raise ValueError(f"{what} {value!r} cannot be used as a directory name")
    for bad, said in (("/", "a slash"), ("\\", "a backslash"), ("\0", "a NUL character")):
        if bad in value:
            raise ValueError(f"{what} {value!r} contains {said}, so it cannot be a directory name")
    return value


def check_relative_path(value: str, what: str = "path") -> PurePosixPath:
    """A relative path (e.g. a file under logs/) whose every segment is safe, as a PurePosixPath.

    Used before writing a downloaded object to disk, so a key cannot place a file outside its
    directory.
    """
    if value.startswith("/"):
        raise ValueError(f"{what} {value!r} must be relative")
    segments = value.split("/")
    for segment in segments:
        check_component(segment, f"segment of {what} {value!r}:")
    return PurePosixPath(*segments)


def normalize_prefix(prefix: str) -> str:
    """A bucket prefix as "" or "a/b/": no leading, doubled or missing trailing slash."""
    segments = [s for s in prefix.split("/") if s]
    for segment in segments:
        check_component(segment, f"segment of prefix {prefix!r}:")
    return "".join(f"{s}/" for s in segments)


def trial_path(agent: str, dataset: str, task: str, attempt: int) -> PurePosixPath:
    """A trial's place under its job: `<agent>/<dataset>/<task>__<n>`."""
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, not {attempt}")
    return PurePosixPath(
        file_name(check_component(agent, "agent name")),
        file_name(check_component(dataset, "dataset name")),
        trial_dir_name(check_component(task, "task name"), attempt),
    )


def job_prefix(prefix: str, job: str) -> str:
    """`<prefix>/jobs/<job>/`: everything a job writes."""
    return f"{normalize_prefix(prefix)}jobs/{file_name(check_component(job, 'job name'))}/"


def job_config_key(prefix: str, job: str) -> str:
    """`<prefix>/jobs/<job>/config.json`: the job's job.yaml as JSON."""
    return job_prefix(prefix, job) + CONFIG_JSON


def job_result_key(prefix: str, job: str) -> str:
    """`<prefix>/jobs/<job>/result.json`: the job's aggregate result."""
    return job_prefix(prefix, job) + RESULT_JSON


def trial_prefix(prefix: str, job: str, agent: str, dataset: str, task: str, attempt: int) -> str:
    """`<prefix>/jobs/<job>/<agent>/<dataset>/<task>__<n>/`: everything one trial writes.

    Append the file constants of this module (RESULT_JSON, SETUP_STDOUT, ...) for its files.
    """
    return f"{job_prefix(prefix, job)}{trial_path(agent, dataset, task, attempt)}/"


def retry_prefix(trial: str, try_number: int) -> str:
    """`<trial prefix>retries/<k>/`: where the files of a trial's try `k` (from 1) are kept once
    a later try has replaced it."""
    if try_number < 1:
        raise ValueError(f"a try is numbered from 1, not {try_number}")
    return f"{trial}{RETRIES_DIR}/{try_number}/"


def dataset_manifest_key(prefix: str, digest: str) -> str:
    """`<prefix>/datasets/<digest>.json`: a dataset bundle's manifest, named by its digest."""
    return f"{normalize_prefix(prefix)}datasets/{check_component(digest, 'manifest digest')}.json"


def task_archive_key(prefix: str, content_hash: str) -> str:
    """`<prefix>/tasks/<content_hash>.tar.gz`: one task's files, named by their content hash."""
    hashed = check_component(content_hash, "task content hash")
    return f"{normalize_prefix(prefix)}tasks/{hashed}.tar.gz"


def environment_archive_key(prefix: str, environment_hash: str) -> str:
    """`<prefix>/environments/<environment_hash>.tar.gz`: a task's environment/ directory alone,
    the build context of its image, named by its content hash."""
    hashed = check_component(environment_hash, "environment hash")
    return f"{normalize_prefix(prefix)}environments/{hashed}.tar.gz"


def build_log_key(prefix: str, job: str, image_hash: str) -> str:
    """`<prefix>/jobs/<job>/builds/<image_hash>.log`: the log of an image build a job's trials
    waited for."""
    return f"{job_prefix(prefix, job)}builds/{check_component(image_hash, 'image hash')}.log"


def s3_uri(bucket: str, key: str) -> str:
    """`s3://<bucket>/<key>`, e.g. for the job's result.json in the RolloutJob status."""
    check_component(bucket, "bucket name")
    if key.startswith("/"):
        raise ValueError(f"object key {key!r} must not start with a slash")
    return f"s3://{bucket}/{key}"


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` URI; the key may be empty (`s3://bucket/`)."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return check_component(bucket, "bucket name"), key


def local_job_dir(jobs_dir: Path, job: str) -> Path:
    """`<jobs_dir>/<job>`: where the CLI puts a job's results."""
    return jobs_dir / file_name(check_component(job, "job name"))


def local_trial_dir(
    jobs_dir: Path, job: str, agent: str, dataset: str, task: str, attempt: int
) -> Path:
    """`<jobs_dir>/<job>/<agent>/<dataset>/<task>__<n>`: one trial's downloaded results."""
    return local_job_dir(jobs_dir, job).joinpath(*trial_path(agent, dataset, task, attempt).parts)

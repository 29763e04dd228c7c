"""Which trials a job has, in which order, and the Kubernetes names and labels they get.

Enumeration follows the seed: for each agent, for each dataset, for each task in the dataset, for
each attempt 1..n_attempts. It takes plain names, not the job model, so the operator, the CLI and
the tests share it without pulling in job.yaml.

Resource names are derived only from (job, agent, dataset, task, attempt), so a restarted operator
computes the same names and re-creates nothing. A name is readable (sanitised, shortened parts) and
ends in a hash of the exact tuple, so names that sanitise alike ("My Agent" and "my-agent", long
names sharing a prefix, names differing only in punctuation) still differ.

Directory names (a trial's `<task>__<n>`, and the job, agent and dataset directories above it)
keep the name as it is, as the seed's layout has it, unless it is too long for a file name:
`file_name` cuts such a name and adds a hash of the whole name (`<start>-<hash>`), the one rule
for every directory a name makes, in storage and on disk.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollout.api.names import LABEL_AGENT, LABEL_DATASET, LABEL_JOB, LABEL_TASK, LABEL_TRIAL

MAX_FILE_NAME_BYTES = 255
"""The longest file name (one path component) ext4, XFS, btrfs, APFS and NTFS all take, in bytes
of UTF-8 (NTFS counts UTF-16 units, never more than UTF-8 bytes)."""

_ATTEMPT_ROOM = len("__") + 10
"""Bytes kept free for `__<n>` when a task's name is cut (n_attempts never has 11 digits)."""

MAX_NAME_LENGTH = 63
"""DNS-1123 label limit, which Pod names, label values and hostnames all respect."""

HASH_LENGTH = 12
"""Characters of hash in a name: 12 base32 characters are 60 bits, so even 100,000 trials whose
readable parts coincide collide with a chance of about 1 in 200 million."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
_NOT_DNS = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class TrialKey:
    """One trial of a job: (agent, dataset, task, attempt), and its place in the job's order.

    Two keys are equal when the four names are; `index` is where enumeration put the trial.
    """

    agent: str
    dataset: str
    task: str
    attempt: int
    index: int = field(default=0, compare=False)

    @property
    def trial_dir_name(self) -> str:
        """The trial's directory under `<agent>/<dataset>/`: `<task>__<attempt>`."""
        return trial_dir_name(self.task, self.attempt)


def trial_dir_name(task: str, attempt: int) -> str:
    """`<task>__<n>`, as the seed names a trial's directory (the task's name cut by `file_name`
    when the whole would be too long for a file name)."""
    whole = f"{task}__{attempt}"
    if len(whole.encode("utf-8", "surrogatepass")) <= MAX_FILE_NAME_BYTES:
        return whole
    # Cut with room for any attempt number, so every attempt of a task has the same start.
    return f"{file_name(task, reserve=_ATTEMPT_ROOM)}__{attempt}"


def file_name(name: str, *, reserve: int = 0) -> str:
    """`name` as a directory name that leaves `reserve` bytes for a suffix: unchanged when it
    fits in MAX_FILE_NAME_BYTES, else its start (cut between characters) and a hash of all of
    it, `<start>-<hash>`. A result is itself a name that fits, so it maps to itself."""
    budget = MAX_FILE_NAME_BYTES - reserve
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) <= budget:
        return name
    tail = f"-{_digest(name)}"
    head = encoded[: budget - len(tail)].decode("utf-8", "ignore")  # drops a cut character
    return head + tail


def _no_duplicates(kind: str, names: Sequence[str], where: str = "") -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{kind} {name!r} appears twice{where}: its trials would collide")
        seen.add(name)


def enumerate_trials(
    agent_names: Sequence[str],
    datasets: Sequence[tuple[str, Sequence[str]]],
    n_attempts: int,
) -> list[TrialKey]:
    """Every trial of a job in the seed's order: agent, dataset, task (in the dataset's order),
    attempt 1..n_attempts.

    `datasets` is a list of (dataset name, task names). Duplicate agents, datasets or tasks within a
    dataset are a ValueError: two trials would share a result directory and a resource name.
    """
    if n_attempts < 1:
        raise ValueError(f"n_attempts must be at least 1, not {n_attempts}")
    _no_duplicates("agent", agent_names)
    _no_duplicates("dataset", [name for name, _ in datasets])
    for dataset, tasks in datasets:
        _no_duplicates("task", tasks, f" in dataset {dataset!r}")
    keys: list[TrialKey] = []
    for agent in agent_names:
        for dataset, tasks in datasets:
            for task in tasks:
                for attempt in range(1, n_attempts + 1):
                    keys.append(TrialKey(agent, dataset, task, attempt, index=len(keys)))
    return keys


def _digest(*parts: str | int) -> str:
    """A short hash of the exact values (JSON-encoded, so ("a-b", "c") and ("a", "b-c") differ)."""
    encoded = json.dumps(list(parts), ensure_ascii=True).encode()
    raw = base64.b32encode(hashlib.sha256(encoded).digest()).decode()
    return raw[:HASH_LENGTH].lower()


def _dns_part(value: str) -> str:
    """Lowercase alphanumerics with single dashes between; may be empty (e.g. all unicode)."""
    return _NOT_DNS.sub("-", value.lower()).strip("-")


def _fit(parts: list[str], budget: int) -> list[str]:
    """Cut the parts to a common maximum length, the largest with which they and the dashes
    between them fit in `budget`: long parts are shortened first and short ones kept whole."""
    parts = [p for p in parts if p]

    def length(cap: int) -> int:
        return sum(min(len(p), cap) for p in parts) + len(parts) - 1

    low, high = 1, max(map(len, parts), default=1)
    if length(high) <= budget:
        return parts  # the common case: nothing to cut
    if length(1) > budget:
        raise ValueError("no room for a readable name")
    while low < high:  # the largest cap that fits; length() grows with the cap
        mid = (low + high + 1) // 2
        low, high = (mid, high) if length(mid) <= budget else (low, mid - 1)
    cap = low
    # A part cut in the middle of "a-b" could end in a dash; a part never starts with one.
    return [p[:cap].rstrip("-") for p in parts]


def trial_resource_name(job: str, agent: str, dataset: str, task: str, attempt: int) -> str:
    """The RolloutTrial's name: a DNS-1123 label, readable, unique per (job, ..., attempt).

    `<job>-<agent>-<dataset>-<task>-<attempt>-<hash>`, the name parts shortened as needed.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, not {attempt}")
    digest = _digest(job, agent, dataset, task, attempt)
    tail = f"{attempt}-{digest}"
    parts = _fit(
        [_dns_part(job), _dns_part(agent), _dns_part(dataset), _dns_part(task)],
        MAX_NAME_LENGTH - len(tail) - 1,
    )
    return "-".join([*parts, tail])


def child_name(parent: str, suffix: str) -> str:
    """`<parent>-<suffix>` as a DNS-1123 label, e.g. a trial's Pod or build Job.

    A parent that is not a DNS label or too long for the suffix is shortened and given a hash of
    its full name, so children of different parents never share a name.
    """
    if not is_dns_label(suffix) or len(suffix) > MAX_NAME_LENGTH - HASH_LENGTH - 2:
        raise ValueError(f"child name suffix {suffix!r} must be a short DNS label")
    if is_dns_label(parent) and len(parent) + 1 + len(suffix) <= MAX_NAME_LENGTH:
        return f"{parent}-{suffix}"
    tail = f"{_digest(parent)}-{suffix}"
    head = _dns_part(parent)[: MAX_NAME_LENGTH - len(tail) - 1].rstrip("-")
    return f"{head}-{tail}" if head else tail


def is_dns_label(value: str) -> bool:
    """Whether `value` is a valid DNS-1123 label (Kubernetes object and Pod names)."""
    return len(value) <= MAX_NAME_LENGTH and _DNS_LABEL.match(value) is not None


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


LABEL_VALUE_RULE = (
    f"at most {MAX_NAME_LENGTH} characters of letters, digits, '-', '_' and '.', starting and "
    "ending with a letter or digit"
)


def label_key_problem(key: str) -> str | None:
    """What makes `key` no Kubernetes label key (a qualified name: an optional DNS subdomain
    prefix of at most 253 characters and `/`, then a name of at most 63 characters of
    alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric); None when it is one."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "is no label key: its prefix before '/' must be a DNS subdomain (lowercase, dots)"
    if not name or len(name) > MAX_NAME_LENGTH or not _LABEL_NAME.match(name):
        return f"is no label key: {LABEL_VALUE_RULE}, after an optional 'prefix/'"
    return None


def is_label_value(value: str) -> bool:
    """Whether `value` is a valid Kubernetes label value."""
    return len(value) <= MAX_NAME_LENGTH and _LABEL_VALUE.match(value) is not None


def label_value(value: str) -> str:
    """`value` as a label value for `rollout.dev/job|trial|agent|dataset|task`.

    A valid value is kept as it is, so `kubectl get rt -l rollout.dev/agent=oracle` works. Any
    other value is sanitised, shortened and given a hash of the original, so two names that
    sanitise alike still get different labels.
    """
    if is_label_value(value):
        return value
    digest = _digest(value)
    head = _NOT_LABEL.sub("-", value)[: MAX_NAME_LENGTH - len(digest) - 1]
    head = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", head)
    return f"{head}-{digest}" if head else digest


def trial_labels(job: str, key: TrialKey, trial_name: str) -> dict[str, str]:
    """The labels every child of a trial carries."""
    return {
        LABEL_JOB: label_value(job),
        LABEL_TRIAL: label_value(trial_name),
        LABEL_AGENT: label_value(key.agent),
        LABEL_DATASET: label_value(key.dataset),
        LABEL_TASK: label_value(key.task),
    }

"""Trial enumeration in the seed's order, and names and labels that are valid and never collide."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from rollout.api.trials import (
    TrialKey,
    child_name,
    enumerate_trials,
    is_dns_label,
    is_label_value,
    label_value,
    trial_labels,
    trial_resource_name,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")

TRICKY = [
    "a",
    "A",
    "my-agent",
    "My Agent",
    "my agent",
    "my_agent",
    "my.agent",
    "my--agent",
    "-my-agent-",
    "MY-AGENT",
    "my-agent.",
    "日本語",
    "日本",
    "ünïcödé",
    "unicode",
    "ß",
    "ss",
    "😀",
    "...",
    "_",
    "-",
    "0",
    "00",
    "a" * 200,
    "a" * 199 + "b",
    "b" + "a" * 199,
    "x" * 62,
    "x" * 63,
    "x" * 64,
    "terminal-bench@2.0",
    "terminal-bench==2.0",
    "task/with/slash",
    "tab\there",
    "claude-code (sonnet 4.5)",
    "claude-code (Sonnet 4.5)",
]


# --- enumeration -------------------------------------------------------------------------------


def test_enumeration_follows_the_seed_nested_order() -> None:
    keys = enumerate_trials(
        ["cpe", "oracle"],
        [("tb", ["hello", "complex"]), ("swe", ["fix-1", "fix-2"])],
        n_attempts=2,
    )
    expected = [
        (agent, dataset, task, attempt)
        for agent in ["cpe", "oracle"]
        for dataset, tasks in [("tb", ["hello", "complex"]), ("swe", ["fix-1", "fix-2"])]
        for task in tasks
        for attempt in [1, 2]
    ]
    assert [(k.agent, k.dataset, k.task, k.attempt) for k in keys] == expected
    # Spelled out, so a change of nesting fails even if the comprehension above were changed.
    assert [(k.agent, k.dataset, k.task, k.attempt) for k in keys[:6]] == [
        ("cpe", "tb", "hello", 1),
        ("cpe", "tb", "hello", 2),
        ("cpe", "tb", "complex", 1),
        ("cpe", "tb", "complex", 2),
        ("cpe", "swe", "fix-1", 1),
        ("cpe", "swe", "fix-1", 2),
    ]
    assert (keys[8].agent, keys[8].dataset, keys[8].task, keys[8].attempt) == (
        "oracle",
        "tb",
        "hello",
        1,
    )
    assert [k.index for k in keys] == list(range(16))
    assert keys[3].trial_dir_name == "complex__2"


def test_keys_compare_by_names_not_position() -> None:
    assert TrialKey("a", "d", "t", 1, index=5) == TrialKey("a", "d", "t", 1, index=0)
    assert len({TrialKey("a", "d", "t", 1, index=i) for i in range(3)}) == 1
    assert TrialKey("a", "d", "t", 1) != TrialKey("a", "d", "t", 2)


@pytest.mark.parametrize(
    ("agents", "datasets", "n_attempts", "message"),
    [
        (["a"], [("d", ["t"])], 0, "n_attempts"),
        (["a", "a"], [("d", ["t"])], 1, "agent 'a' appears twice"),
        (["a"], [("d", ["t"]), ("d", ["u"])], 1, "dataset 'd' appears twice"),
        (["a"], [("d", ["t", "t"])], 1, "task 't' appears twice in dataset 'd'"),
    ],
)
def test_enumeration_refuses_collisions(
    agents: list[str], datasets: list[tuple[str, list[str]]], n_attempts: int, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        enumerate_trials(agents, datasets, n_attempts)


def test_same_task_name_in_two_datasets_is_fine() -> None:
    keys = enumerate_trials(["a"], [("d1", ["t"]), ("d2", ["t"])], 1)
    assert len(set(keys)) == 2


# --- resource names ----------------------------------------------------------------------------


def test_resource_name_is_readable_and_stable() -> None:
    # Pinned: a change here renames every trial, and a restarted operator would re-create them.
    assert (
        trial_resource_name("my-eval-run", "cpe", "terminal-bench", "hello-world", 1)
        == "my-eval-run-cpe-terminal-bench-hello-world-1-xti762domvvz"
    )


def test_long_names_are_cut_longest_first() -> None:
    name = trial_resource_name("job", "agent", "d" * 100, "t" * 100, 3)
    # 63 characters less "-3-<hash>" leave 48 for the parts: the short ones stay whole and the
    # two long ones share the cut equally (18 each; the odd character left over is unused).
    job, agent, dataset, task, attempt, digest = name.split("-")
    assert (job, agent, dataset, task, attempt) == ("job", "agent", "d" * 18, "t" * 18, "3")
    assert len(digest) == 12


def test_names_are_valid_and_distinct_over_tricky_tuples() -> None:
    names: dict[str, tuple[str, str, str, str, int]] = {}
    for agent, dataset, task in itertools.product(TRICKY, repeat=3):
        for attempt in (1, 12):
            key = ("job", agent, dataset, task, attempt)
            name = trial_resource_name(*key)
            assert DNS_LABEL.match(name), (key, name)
            assert is_dns_label(name)
            assert names.setdefault(name, key) == key, f"{key} and {names[name]} share {name}"
            assert trial_resource_name(*key) == name
    assert len(names) == len(TRICKY) ** 3 * 2


def test_names_are_valid_and_distinct_over_random_tuples() -> None:
    rng = random.Random(20250115)
    alphabet = "aAbB-_.  /\\:@日本😀ßé0123456789"
    seen: dict[str, tuple[str, str, str, str, int]] = {}
    for _ in range(5000):
        key = (
            *("".join(rng.choices(alphabet, k=rng.randint(1, 120))) for _ in range(4)),
            rng.randint(1, 1000),
        )
        name = trial_resource_name(*key)  # type: ignore[arg-type]
        assert DNS_LABEL.match(name), (key, name)
        assert seen.setdefault(name, key) == key  # type: ignore[arg-type]


def test_names_differ_across_jobs() -> None:
    name = trial_resource_name
    assert name("Job", "a", "d", "t", 1) != name("job", "a", "d", "t", 1)
    # Same readable part "j-a-b-d-t-1", different tuples.
    assert name("j-a", "b", "d", "t", 1) != name("j", "a-b", "d", "t", 1)
    assert name("j-a", "b", "d", "t", 1).startswith("j-a-b-d-t-1-")


# --- child names -------------------------------------------------------------------------------


def test_child_name() -> None:
    assert child_name("trial-abc", "pod") == "trial-abc-pod"
    long_parents = [trial_resource_name("job", "a", "d", "t" * 80, n) for n in range(1, 50)]
    children = [child_name(p, "build") for p in long_parents]
    assert all(DNS_LABEL.match(c) and c.endswith("-build") for c in children)
    assert len(set(children)) == len(children)
    assert child_name("Not A Label", "pod") != child_name("not-a-label", "pod")
    with pytest.raises(ValueError, match="suffix"):
        child_name("parent", "Bad Suffix")


# --- labels ------------------------------------------------------------------------------------


def test_valid_label_values_are_kept() -> None:
    for value in ["oracle", "My_Agent.v2", "terminal-bench", "x" * 63, "0"]:
        assert label_value(value) == value


def test_label_values_are_valid_and_distinct() -> None:
    values = [*TRICKY, *(a + b for a, b in itertools.product(TRICKY[:12], repeat=2))]
    labels: dict[str, str] = {}
    for value in values:
        label = label_value(value)
        assert LABEL_VALUE.match(label), (value, label)
        assert is_label_value(label)
        assert label
        assert labels.setdefault(label, value) == value, f"{value!r} and {labels[label]!r}"
        assert label_value(value) == label


def test_trial_labels() -> None:
    key = TrialKey("claude-code (sonnet)", "terminal-bench", "hello-world", 1)
    name = trial_resource_name("run", key.agent, key.dataset, key.task, key.attempt)
    labels = trial_labels("run", key, name)
    assert list(labels) == [
        "rollout.dev/job",
        "rollout.dev/trial",
        "rollout.dev/agent",
        "rollout.dev/dataset",
        "rollout.dev/task",
    ]
    assert labels["rollout.dev/trial"] == name
    assert labels["rollout.dev/task"] == "hello-world"
    assert labels["rollout.dev/agent"].startswith("claude-code-sonnet-")
    assert all(LABEL_VALUE.match(v) for v in labels.values())

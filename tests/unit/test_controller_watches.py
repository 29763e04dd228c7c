"""The indexes the operator's own watches keep, and how a watch's stream is cut into events."""

from __future__ import annotations

from typing import Any

from rollout.controller.index import PodEntry
from rollout.controller.watches import _lines, pods_index, trials_index


def trial(name: str, job_uid: str | None, phase: str | None = None) -> dict[str, Any]:
    owners = [{"kind": "RolloutJob", "name": "job", "uid": job_uid, "controller": True}]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "ownerReferences": owners if job_uid else [],
        },
        "spec": {"agent": {"name": "oracle"}, "datasetName": "d", "taskName": "t", "attempt": 1},
        "status": {"phase": phase} if phase else {},
    }


def test_trials_are_indexed_by_their_jobs_uid_and_follow_their_changes() -> None:
    index = trials_index()
    index.put(trial("a", "job-1"))
    index.put(trial("b", "job-1"))
    index.put(trial("c", "job-2"))
    index.put(trial("orphan", None))  # no RolloutJob owner: not indexed
    assert sorted(t.name for t in index.get("job-1")) == ["a", "b"]
    assert len(index) == 3
    index.put(trial("a", "job-1", phase="Running"))  # a change replaces the entry
    assert {t.name: t.phase for t in index.get("job-1")}["a"] == "Running"
    assert len(index) == 3
    index.remove("uid-b")
    index.remove("uid-b")  # gone already: nothing to do
    assert [t.name for t in index.get("job-1")] == ["a"]
    index.remove("uid-c")
    assert list(index.get("job-2")) == []  # an emptied key goes
    assert index.get("job-2", "nothing") == "nothing"
    index.put(trial("a", None))  # it lost its owner: no longer indexed
    assert list(index.get("job-1")) == []


def test_a_new_listing_replaces_its_namespace_only() -> None:
    """One index serves the watches of every watched namespace; one watch's new listing (after
    a 410) replaces what the index had of its namespace, and nothing else."""
    index = trials_index()
    index.put(trial("a", "job-1"))
    other = trial("x", "job-9")
    other["metadata"]["namespace"] = "other"
    index.put(other)
    listed = index.fresh()
    listed.put(trial("b", "job-1"))
    index.adopt(listed, "ns")
    assert [t.name for t in index.get("job-1")] == ["b"]  # a is gone: the listing lacks it
    assert [t.name for t in index.get("job-9")] == ["x"]  # another namespace's: kept
    assert len(index) == 2
    index.remove("uid-b")  # what was adopted is the index's own
    assert list(index.get("job-1")) == []
    everything = index.fresh()
    index.adopt(everything, None)  # the whole cluster's listing: all of it
    assert len(index) == 0


def test_a_trials_pods_are_indexed_under_the_trial() -> None:
    index = pods_index()
    for name in ("t1", "t1-r1"):
        index.put(
            {
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "uid": f"uid-{name}",
                    "labels": {"rollout.dev/trial": "t1"},
                },
                "spec": {"containers": []},
                "status": {},
            }
        )
    pods = list(index.get(("ns", "t1")))
    assert all(isinstance(p, PodEntry) for p in pods)
    assert sorted(p.name for p in pods) == ["t1", "t1-r1"]


def test_a_streams_lines_are_whole_events_however_the_chunks_fall() -> None:
    chunks = [b'{"type":"ADD', b'ED"}\n{"type":"MODIFIED"}\n\n{"ty', b'pe":"DELETED"}']
    assert list(_lines(chunks)) == [
        b'{"type":"ADDED"}',
        b'{"type":"MODIFIED"}',
        b'{"type":"DELETED"}',  # the last, unterminated, when the stream ends
    ]
    assert list(_lines([b"\n", b""])) == []

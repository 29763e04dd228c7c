"""The data model: task.toml, datasets, job.yaml, results and the two custom resources.

Pure pydantic models and functions, and (in `wire`) the contract between the operator and the
runner. Imports nothing of the cluster or of object storage, and does no network, git or archive
I/O (that is `rollout.datasets`).
"""

"""The data model: task.toml, datasets, job.yaml, results and the two custom resources.

Pure pydantic models and functions. Imports nothing of the cluster or of object storage.
"""

"""Getting datasets and bundling them: registry.json over HTTP, tasks from git, archives.

The I/O that the models in `rollout.api` (dataset, manifest, archive) leave out: downloading a
registry, fetching repositories with git (`git`), loading a registry dataset's tasks
(`registry`), and making task archives and manifests for storage (`bundle`). Used by the CLI;
the runner never imports it (it extracts archives itself, `rollout_runner.archive`).
"""

"""Local mode: `rollout run job.yaml --local` runs a job on this machine, without a cluster or a
bucket: the runner's same trial code, with a sandbox on this machine in place of a trial Pod."""

"""The operator that reconciles RolloutJobs and RolloutTrials: kopf for jobs and images, its own
watches for trials and their Pods."""

"""The kopf operator that reconciles RolloutJobs and RolloutTrials."""

"""The bridge controller (`rollout-bridge`): RolloutTrials whose environment is not a Pod.

The operator creates every RolloutTrial of a job; for one whose `environmentType` is not
`kubernetes` it creates no Pod and leaves the trial to a bridge. A bridge claims the trial
(`claim`), starts its sandbox through a provider (`providers`), runs the runner's own trial code
in-process against that sandbox, and writes the trial's status as the operator writes it from a
Pod's termination message, so the job's counters, metrics and result.json need no special case.
"""

"""The contract between the operator and the runner: what one puts in a trial Pod, the other reads.

- `spec`: the trial spec in the runner's environment, and the variables carrying agent Secrets;
- `shim`: the environment container's command (the shim) and its control directory protocol;
- `termination`: the runner's termination message, which the operator reads from the Pod status.

Both sides import these modules and nothing of each other, so that a change to the contract is
a change here. Pure: no I/O beyond reading the shim's source from the package.
"""

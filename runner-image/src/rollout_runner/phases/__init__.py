"""The phases of a trial, one module each: setup, agent, verifier, teardown, collect."""

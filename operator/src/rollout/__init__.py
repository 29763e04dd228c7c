"""Rollout: run agent evaluations and RL rollouts on Kubernetes."""

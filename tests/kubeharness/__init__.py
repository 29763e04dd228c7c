"""The Kubernetes API of the tests: the `Kube` interface, the emulator, a real control plane
and the test kubelet. tests/kube.md says how to use it."""

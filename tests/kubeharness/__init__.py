"""The Kubernetes API of the operator's and the CLI's integration tests: one `Kube` interface, two
backends, and the kubelet played by the test. tests/kube.md says how to use it and what the
emulator does not emulate.

- kube.py: `Kube`, what a test holds: object helpers (create/get/list/patch/delete), the request
  log (`calls()`, `writes()`), injected errors (`fail()`), `wait_for()`, `settle()`, and
  `operator()`, which runs a kopf operator in a thread of its own against the API;
  pod_status.py: its kubelet helpers (`set_pod_status()`, `running()`, `terminated()`...).
- resources.py (resource names, `Body`), identity.py (who talks to the API; the chart's RBAC),
  crds.py, calls.py (`ApiCall`), polling.py (`wait_for`), operator_thread.py (kopf in a thread).
- emulator/: kmock's Kubernetes emulator made strict (server.py and its mixins), on loopback in
  the test's event loop; `emulator.emulated.kube_api()` starts one and yields an `EmulatedKube`.
- real/: a real control plane (etcd, kube-apiserver, kube-controller-manager) for the session,
  `real.plane.ControlPlane`, and a namespace of it per test, `real.kube.RealKube`.
- kubelet.py: the kubelet's `$(NAME)` expansion, and a test kubelet that runs a trial Pod.
- build_kubelet.py: a test kubelet that runs an image build Pod (`BuildPodRunner`,
  `run_build_pod`): its init container, then the builder and the report, as processes.
"""

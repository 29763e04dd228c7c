"""A real Kubernetes control plane for the suite, behind the same `Kube` helpers as the emulator.

controller-runtime's envtest convention: the binaries are found in the directory that
`KUBEBUILDER_ASSETS` names (default `/usr/local/kubebuilder/bin`): `kube-apiserver` is required,
`etcd` is taken from there or from PATH (Debian's `etcd-server`), and `kube-controller-manager`,
when it is there too, runs the garbage collector and the namespace and ServiceAccount
controllers (so owner references, namespace deletion and the `default` ServiceAccount behave as
on a cluster; without it, tests that need garbage collection are skipped). No node, no kubelet,
no scheduler: the test plays the kubelet (`Kube.set_pod_status`), binding each Pod to a Node
object of its own before it writes the Pod's status, and confirming the deletion of bound Pods as
a kubelet does.

One control plane serves the whole session; every test gets a namespace of its own. Clients
authenticate with static tokens (`--token-auth-file`) and RBAC is on:

- the harness (`rollout-harness`, system:masters) makes the test's own requests;
- the operator and the bridge run as the chart's ServiceAccounts (a token for each user name),
  with exactly the RBAC objects the chart renders (cluster-wide, with the bridge enabled), so
  that a call the chart does not allow fails the test;
- a user (`rollout-user`, system:masters) runs the CLI;
- kube-controller-manager has a token of its own.

The request log (`calls()`) comes from the API server's audit log (JSON lines): the controllers'
(operators' and bridge's) and the user's requests, writes with their bodies, as the emulator logs
every request it serves. A barrier request makes sure that everything answered before `calls()`
was called is in the log.

plane.py starts it, kube.py is a test's `RealKube`; client.py, audit.py and certificates.py serve
them.
"""

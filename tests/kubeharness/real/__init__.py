"""A real control plane (etcd, kube-apiserver, kube-controller-manager) behind `Kube`."""

"""The emulator: a Kubernetes API server on loopback, in the test's event loop (kmock, made
strict: see server.py). `emulated.kube_api()` starts one for a test."""

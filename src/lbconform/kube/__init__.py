"""Kubernetes access: clients from kubeconfigs, JSON requests, manifests, jigs, diagnostics."""

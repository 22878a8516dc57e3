"""kube-proxy chaos: restart it on one node, through the provider."""

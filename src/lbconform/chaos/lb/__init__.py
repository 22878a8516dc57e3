"""Load-balancer chaos: restart the implementation's own controller, through the provider."""

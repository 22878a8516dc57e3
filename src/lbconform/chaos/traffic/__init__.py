"""Traffic during an experiment: a detached recorder drives requests at the VIP; probes count."""

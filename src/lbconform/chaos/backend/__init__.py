"""Backend chaos: backends whose readiness goes down and comes back."""

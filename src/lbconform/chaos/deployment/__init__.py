"""Deployment probes that chaostoolkit-kubernetes lacks: waiting for a rollout to finish."""

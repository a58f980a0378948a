"""Operating a running server: request logs, Prometheus metrics, health and readiness probes."""

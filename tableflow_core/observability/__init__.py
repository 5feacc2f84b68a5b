"""What `tableflow run` tells a monitoring system: Prometheus metrics, health and
readiness endpoints (docs/observability.md)."""

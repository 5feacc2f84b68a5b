"""`tableflow run --metrics-port`: the observer and the HTTP endpoint, started together."""

from __future__ import annotations

from dataclasses import dataclass

from tableflow_core.config.project import Project, Table
from tableflow_core.observability.health import Health
from tableflow_core.observability.metrics import RunMetrics
from tableflow_core.observability.observer import RunObservation
from tableflow_core.observability.readers import TableReader
from tableflow_core.observability.server import DEFAULT_HOST, MetricsServer


@dataclass
class RunEndpoint:
    observation: RunObservation
    server: MetricsServer

    def close(self, settle_s: float = 0.0) -> None:
        """Stop serving (after the last cycle's readings, waiting up to `settle_s`)."""
        if settle_s:
            self.observation.settle(settle_s)
        self.observation.close()
        self.server.stop()


def serve_run_metrics(
    project: Project, tables: tuple[Table, ...], port: int, host: str = DEFAULT_HOST
) -> RunEndpoint:
    metrics = RunMetrics(tables)
    health = Health(tuple(t.name for t in tables))
    observation = RunObservation(tables, metrics, health, TableReader(project))
    try:
        server = MetricsServer(metrics.registry, health, port, host)
    except BaseException:
        observation.close()
        raise
    return RunEndpoint(observation, server)

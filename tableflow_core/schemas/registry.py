"""Schema Registry connection settings and a per-process client cache."""

from __future__ import annotations

import threading
from typing import Any

import requests
from confluent_kafka.schema_registry import SchemaRegistryClient
from pydantic import BaseModel, ConfigDict, SecretStr

from tableflow_core.errors import TableflowError
from tableflow_core.redaction import redact_url

# A registry that does not answer within this is reported as down (`probe_registry`).
PROBE_TIMEOUT_S = 5.0
# One request of the client's (connect, send, each read). confluent-kafka's own default is
# no timeout at all: a registry that accepts a connection and never answers would hang a
# plan or a Spark task for ever instead of failing it as an outage.
REQUEST_TIMEOUT_S = 30.0

_clients: dict[tuple[str, str | None, str | None, float], SchemaRegistryClient] = {}
_clients_lock = threading.Lock()


class RegistrySettings(BaseModel):
    """Where the Confluent-API schema registry is. The password never appears in repr."""

    model_config = ConfigDict(frozen=True)

    url: str
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    request_timeout_s: float = REQUEST_TIMEOUT_S

    @property
    def display_url(self) -> str:
        """The URL as messages show it (a password in it masked)."""
        return redact_url(self.url)

    def client(self) -> SchemaRegistryClient:
        """One client per settings per process (it caches schemas by id internally).

        `mock://...` URLs give confluent-kafka's in-process mock registry (unit tests).
        """
        password = self.basic_auth_password.get_secret_value() if self.basic_auth_password else None
        cache_key = (self.url, self.basic_auth_user, password, self.request_timeout_s)
        with _clients_lock:
            client = _clients.get(cache_key)
            if client is None:
                conf: dict[str, Any] = {"url": self.url, "timeout": self.request_timeout_s}
                if self.basic_auth_user is not None:
                    conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{password or ''}"
                client = SchemaRegistryClient.new_client(conf)
                _clients[cache_key] = client
            return client


class RegistryUnreachableError(TableflowError, RuntimeError):
    """The schema registry did not answer, or answered with a server error."""

    component_down = True

    def __init__(self, display_url: str, detail: str) -> None:
        super().__init__(f"schema registry at {display_url} is not reachable: {detail}")
        self.address = display_url


def probe_registry(settings: RegistrySettings, timeout: float = PROBE_TIMEOUT_S) -> None:
    """RegistryUnreachableError unless the registry answers `GET /subjects` (any answer
    below 500: a 401 is a registry that is up and refuses the credentials, which reading
    a schema then reports). One request; `mock://` registries are always up."""
    if settings.url.startswith("mock://"):
        return
    password = (
        settings.basic_auth_password.get_secret_value() if settings.basic_auth_password else ""
    )
    auth = (settings.basic_auth_user, password) if settings.basic_auth_user is not None else None
    try:
        answer = requests.get(settings.url.rstrip("/") + "/subjects", auth=auth, timeout=timeout)
    except requests.RequestException as exc:
        # Not str(exc): it quotes the URL, which may hold a password.
        raise RegistryUnreachableError(settings.display_url, _reason(exc, timeout)) from exc
    if answer.status_code >= 500:
        raise RegistryUnreachableError(settings.display_url, f"HTTP {answer.status_code}")


def _reason(exc: requests.RequestException, timeout: float) -> str:
    if isinstance(exc, requests.Timeout):
        return f"no answer within {timeout:.0f}s"
    if isinstance(exc, requests.ConnectionError):
        return "Connection refused" if "refused" in str(exc) else "cannot connect"
    return type(exc).__name__

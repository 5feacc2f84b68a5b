"""Schema Registry connection settings and a per-process client cache."""

from __future__ import annotations

import threading

from confluent_kafka.schema_registry import SchemaRegistryClient
from pydantic import BaseModel, ConfigDict, SecretStr

from tableflow_core.redaction import redact_url

_clients: dict[tuple[str, str | None, str | None], SchemaRegistryClient] = {}
_clients_lock = threading.Lock()


class RegistrySettings(BaseModel):
    """Where the Confluent-API schema registry is. The password never appears in repr."""

    model_config = ConfigDict(frozen=True)

    url: str
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None

    @property
    def display_url(self) -> str:
        """The URL as messages show it (a password in it masked)."""
        return redact_url(self.url)

    def client(self) -> SchemaRegistryClient:
        """One client per settings per process (it caches schemas by id internally).

        `mock://...` URLs give confluent-kafka's in-process mock registry (unit tests).
        """
        password = self.basic_auth_password.get_secret_value() if self.basic_auth_password else None
        cache_key = (self.url, self.basic_auth_user, password)
        with _clients_lock:
            client = _clients.get(cache_key)
            if client is None:
                conf: dict[str, str] = {"url": self.url}
                if self.basic_auth_user is not None:
                    conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{password or ''}"
                client = SchemaRegistryClient.new_client(conf)
                _clients[cache_key] = client
            return client

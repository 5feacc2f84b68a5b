"""What a project's local stack hands to the project's config: the values `dev_stack()` renders.

`tableflow dev up` chooses the stack's ports once per project (free ones, unless the target
pins them) and records them, with the addresses clients use, in `<data_dir>/stack.json`;
the credentials it makes (the S3 keys, the Kafka SCRAM user) go to
`<data_dir>/credentials.json`, readable by the user only. A target names them instead of
fixed ports or environment variables:

    kafka:
      bootstrap_servers: "{{ dev_stack('kafka_bootstrap') }}"

Before the project's first `dev up` there is no record: `dev_stack()` renders placeholders
(port 0), so `validate` works on a fresh clone, and every command that connects stops with
"this project's dev stack is not running" before trying (`tableflow_core.dev.stack`).
The dev layer writes these files; this module only defines and reads them (the config
layer sits below it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tableflow_core.errors import TableflowError

STACK_FILE = "stack.json"
CREDENTIALS_FILE = "credentials.json"
DEFAULT_DATA_DIR = "./.tableflow/dev"

KAFKA = "kafka"
REGISTRY = "schema-registry"
CATALOG = "catalog"
S3 = "s3"


@dataclass(frozen=True)
class StackValue:
    """One name `dev_stack()` knows: the component that provides it, whether it is a
    secret (kept in the credentials file, redacted from every output), and what renders
    before the stack was ever started."""

    component: str
    description: str
    placeholder: str
    secret: bool = False


VALUES: dict[str, StackValue] = {
    "kafka_bootstrap": StackValue(KAFKA, "`host:port` of the stack's Kafka", "127.0.0.1:0"),
    "kafka_sasl_username": StackValue(
        KAFKA, "the SCRAM-SHA-512 user (with `kafka: {security: sasl_ssl}`)", "unset"
    ),
    "kafka_sasl_password": StackValue(KAFKA, "that user's password", "unset", secret=True),
    "kafka_ca_location": StackValue(
        KAFKA, "the CA file that signed the broker's TLS certificate", "unset"
    ),
    "schema_registry_url": StackValue(REGISTRY, "the registry's base URL", "http://127.0.0.1:0"),
    "catalog_port": StackValue(CATALOG, "the embedded catalog's port", "0"),
    "catalog_url": StackValue(CATALOG, "the embedded catalog's URL", "http://127.0.0.1:0"),
    "s3_endpoint": StackValue(S3, "the S3 server's URL (s3proxy)", "http://127.0.0.1:0"),
    "s3_region": StackValue(S3, "the region clients name", "us-east-1"),
    "s3_bucket": StackValue(S3, "the bucket `dev up` creates", "warehouse"),
    "s3_access_key_id": StackValue(S3, "the S3 access key id", "unset", secret=True),
    "s3_secret_access_key": StackValue(S3, "the S3 secret access key", "unset", secret=True),
}


@dataclass(frozen=True)
class StackRecord:
    """The stack's addresses (`stack.json`) and credentials (`credentials.json`)."""

    values: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    ports: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, data_dir: Path) -> StackRecord | None:
        """The record under `data_dir`, None before the first `dev up`."""
        stack_file = data_dir / STACK_FILE
        if not stack_file.is_file():
            return None
        try:
            public = json.loads(stack_file.read_text())
            credentials = data_dir / CREDENTIALS_FILE
            private = json.loads(credentials.read_text()) if credentials.is_file() else {}
        except (OSError, ValueError) as exc:
            raise StackRecordError(
                f"{stack_file} or its credentials file is unreadable ({exc}); "
                "`tableflow dev down`, then delete it and run `tableflow dev up`"
            ) from exc
        return cls(
            values={str(k): str(v) for k, v in public.get("values", {}).items()},
            secrets={str(k): str(v) for k, v in private.items()},
            ports={
                str(name): {str(k): int(v) for k, v in ports.items()}
                for name, ports in public.get("ports", {}).items()
            },
        )

    def write(self, data_dir: Path) -> None:
        """Both files, atomically each; the credentials with mode 0600 from the start."""
        data_dir.mkdir(parents=True, exist_ok=True)
        _replace(
            data_dir / STACK_FILE,
            json.dumps({"ports": self.ports, "values": self.values}, indent=2, sort_keys=True),
        )
        _replace(data_dir / CREDENTIALS_FILE, json.dumps(self.secrets, indent=2, sort_keys=True))

    def value(self, name: str) -> str | None:
        return self.secrets.get(name) if VALUES[name].secret else self.values.get(name)


class StackRecordError(TableflowError, ValueError):
    """The stack's record exists but cannot be read."""


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    temporary.replace(path)

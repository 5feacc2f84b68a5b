"""Errors in the shape Confluent Schema Registry returns: `{"error_code", "message"}`."""

from __future__ import annotations

from tableflow_core.errors import TableflowError


class RegistryError(TableflowError):
    """An error the HTTP layer returns as `{"error_code": code, "message": message}`."""

    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.error_code = error_code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    return _soft_deleted(f"Subject '{subject}'", 40404)


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return _not_soft_deleted(f"Subject '{subject}'", 40405)


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return _soft_deleted(f"Subject '{subject}' Version {version}", 40406)


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return _not_soft_deleted(f"Subject '{subject}' Version {version}", 40407)


def _soft_deleted(what: str, error_code: int) -> RegistryError:
    """A read of what was soft deleted (Confluent's wording, subject or version)."""
    message = f"{what} was soft deleted. Set permanent=true to delete permanently"
    return RegistryError(404, error_code, message)


def _not_soft_deleted(what: str, error_code: int) -> RegistryError:
    """A permanent delete of what was not soft deleted first (Confluent's wording)."""
    message = f"{what} was not deleted first before being permanently deleted"
    return RegistryError(404, error_code, message)


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are "
        'between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level. Valid values are none, backward, forward, full, "
        f"backward_transitive, forward_transitive, and full_transitive (got {level!r})",
    )


def incompatible_schema(subject: str, messages: list[str]) -> RegistryError:
    return RegistryError(
        409,
        409,
        f"Schema being registered is incompatible with an earlier schema for subject "
        f'"{subject}", details: {messages}',
    )


def bad_request(detail: str) -> RegistryError:
    return RegistryError(400, 400, detail)

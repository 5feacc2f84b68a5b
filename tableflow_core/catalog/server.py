"""Command line entry point of the catalog server (the dev stack launches exactly this).

    TABLEFLOW_CATALOG_CLIENT_SECRET=... python -m tableflow_core.catalog.server \\
        --host 127.0.0.1 --port 8181 --warehouse ./warehouse \\
        --database-url sqlite:///./warehouse/catalog.db \\
        --auth client-credentials --client-id tableflow

The library API lives in `runner` and is re-exported here for convenience.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

from pydantic import SecretStr, ValidationError

from tableflow_core.catalog.runner import (
    RunningCatalogServer,
    serve_forever,
    serve_in_background,
    serve_in_subprocess,
)
from tableflow_core.catalog.settings import CLIENT_SECRET_ENV, CatalogServerSettings
from tableflow_core.catalog.storage import (
    ACCESS_KEY_ID_ENV,
    SECRET_ACCESS_KEY_ENV,
    SESSION_TOKEN_ENV,
    ObjectStorage,
    is_object_store_location,
)

__all__ = [
    "CatalogServerSettings",
    "RunningCatalogServer",
    "main",
    "serve_forever",
    "serve_in_background",
    "serve_in_subprocess",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tableflow_core.catalog.server",
        description=f"tableflow's Iceberg REST catalog. The client secret is read from ${CLIENT_SECRET_ENV}.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument(
        "--warehouse", required=True, help="warehouse directory, or s3://bucket/prefix"
    )
    parser.add_argument(
        "--database-url", default=None, help="default sqlite:///<warehouse>/catalog.db"
    )
    parser.add_argument(
        "--auth", choices=["none", "client-credentials"], default="client-credentials"
    )
    parser.add_argument("--client-id", default="tableflow")
    parser.add_argument(
        "--allow-location",
        action="append",
        default=[],
        metavar="URI",
        help="a location prefix besides the warehouse where tables may live (repeatable)",
    )
    parser.add_argument("--catalog-name", default="tableflow", help="name of the catalog's rows")
    parser.add_argument("--token-ttl-seconds", type=int, default=3600)
    parser.add_argument(
        "--token-max-lifetime-seconds",
        type=int,
        default=86400,
        help="token exchanges renew a token without the secret up to this long after "
        "its client-credentials grant",
    )
    storage = parser.add_argument_group(
        "object storage (s3:// warehouse)",
        f"keys are read from ${ACCESS_KEY_ID_ENV} and ${SECRET_ACCESS_KEY_ENV} "
        f"(and ${SESSION_TOKEN_ENV}); without them, the AWS default chain",
    )
    storage.add_argument("--s3-endpoint", default=None, help="S3 API URL (default: AWS)")
    storage.add_argument("--s3-region", default=None, help="region (default us-east-1)")
    addressing = storage.add_mutually_exclusive_group()
    addressing.add_argument(
        "--s3-path-style-access", dest="s3_path_style", action="store_true", default=None
    )
    addressing.add_argument("--s3-virtual-host", dest="s3_path_style", action="store_false")
    storage.add_argument(
        "--vend-credentials",
        action="store_true",
        help="hand the keys to authenticated clients that ask (X-Iceberg-Access-Delegation)",
    )
    storage.add_argument(
        "--sts-role-arn",
        default=None,
        help="with --vend-credentials: vend temporary credentials of this role, scoped to "
        "each table's location (STS AssumeRole with a session policy), not the keys held",
    )
    storage.add_argument("--sts-endpoint", default=None, help="STS API URL (default: AWS)")
    storage.add_argument(
        "--vended-credential-seconds",
        type=int,
        default=3600,
        help="lifetime of vended temporary credentials (AWS: 900 to 43200)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    # For serve_in_subprocess: a socket the parent bound, and stop when the parent is gone.
    parser.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def settings_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> CatalogServerSettings:
    environ = dict(os.environ) if environ is None else environ
    secret = environ.get(CLIENT_SECRET_ENV)
    return CatalogServerSettings(
        storage=storage_from_args(args, environ),
        host=args.host,
        port=args.port,
        warehouse=args.warehouse,
        database_url=args.database_url,
        auth=args.auth,
        allowed_locations=tuple(args.allow_location),
        client_id=args.client_id,
        client_secret=SecretStr(secret) if secret else None,
        token_ttl_seconds=args.token_ttl_seconds,
        token_max_lifetime_seconds=args.token_max_lifetime_seconds,
        catalog_name=args.catalog_name,
        log_level=args.log_level,
        access_log=not args.no_access_log,
    )


def storage_from_args(args: argparse.Namespace, environ: dict[str, str]) -> ObjectStorage | None:
    """Object storage settings when the warehouse is s3:// or any --s3-* option is given."""
    given = (
        args.s3_endpoint is not None
        or args.s3_region is not None
        or args.s3_path_style is not None
        or args.vend_credentials
        or args.sts_role_arn is not None
    )
    if not given and not is_object_store_location(args.warehouse):
        return None
    values: dict[str, object] = {
        "vend_credentials": args.vend_credentials,
        "sts_role_arn": args.sts_role_arn,
        "sts_endpoint": args.sts_endpoint,
        "vended_credential_seconds": args.vended_credential_seconds,
    }
    if args.s3_endpoint is not None:
        values["endpoint"] = args.s3_endpoint
    if args.s3_region is not None:
        values["region"] = args.s3_region
    if args.s3_path_style is not None:
        values["path_style_access"] = args.s3_path_style
    return ObjectStorage.from_environment(environ, **values)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        # pydantic never prints SecretStr values.
        print(f"catalog server: invalid settings: {exc}", file=sys.stderr)
        return 2
    if args.exit_on_stdin_eof:
        threading.Thread(target=_stop_on_stdin_eof, name="parent-watch", daemon=True).start()
    sock = socket.socket(fileno=args.listen_fd) if args.listen_fd is not None else None
    serve_forever(settings, sock)
    return 0


def _stop_on_stdin_eof() -> None:
    """SIGTERM ourselves (uvicorn's graceful shutdown) once stdin closes: the parent is gone."""
    while sys.stdin.buffer.read(4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())

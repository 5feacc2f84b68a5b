"""Run the development Schema Registry.

    python -m tableflow_core.registry.server --host 127.0.0.1 --port 8081 \\
        --database .tableflow/dev/registry/registry.db [--basic-auth-user USER]

With --basic-auth-user, the password comes from the environment variable
TABLEFLOW_REGISTRY_PASSWORD (never from the command line, so it stays out of `ps`).
Without it the registry has no authentication, and then it only binds to a loopback
address (the catalog's rule for auth none).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn

from tableflow_core.addresses import is_loopback
from tableflow_core.registry.app import create_app
from tableflow_core.registry.service import SchemaRegistry

PASSWORD_ENV = "TABLEFLOW_REGISTRY_PASSWORD"
_log = logging.getLogger("tableflow.registry")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="tableflow development Schema Registry")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--database", type=Path, required=True, help="SQLite file")
    parser.add_argument("--basic-auth-user", default=None, help=f"password from ${PASSWORD_ENV}")
    parser.add_argument("--log-level", default="warning")
    return parser.parse_args(argv)


def bind_problem(host: str, basic_auth_user: str | None) -> str | None:
    """Why the registry may not listen on `host` with these settings, or None."""
    if basic_auth_user or is_loopback(host):
        return None
    return (
        f"the schema registry without authentication is refused on {host!r}: it only "
        "binds to a loopback address (127.0.0.1, ::1, localhost) unless basic auth is on "
        f"(--basic-auth-user, password in ${PASSWORD_ENV})"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    if problem := bind_problem(args.host, args.basic_auth_user):
        print(problem, file=sys.stderr)
        return 2
    password = os.environ.get(PASSWORD_ENV)
    if args.basic_auth_user and not password:
        print(f"--basic-auth-user needs the password in ${PASSWORD_ENV}", file=sys.stderr)
        return 2
    registry = SchemaRegistry.open(args.database)
    app = create_app(registry, args.basic_auth_user, password)
    auth = f"basic auth for user {args.basic_auth_user!r}" if args.basic_auth_user else "no auth"
    print(
        f"tableflow schema registry on http://{args.host}:{args.port} "
        f"(database {args.database}, {auth})",
        flush=True,
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    finally:
        registry.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Connection properties for clients of a running catalog server."""

from __future__ import annotations

TOKEN_PATH = "/v1/oauth/tokens"
CONFIG_PATH = "/v1/config"

# Iceberg's Java REST client defaults to ResolvingFileIO, which falls back to
# HadoopFileIO for file:// paths; naming it keeps Spark independent of that default.
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"


def token_endpoint(uri: str) -> str:
    return uri.rstrip("/") + TOKEN_PATH


def pyiceberg_catalog_properties(
    uri: str, credential: str | None = None, warehouse: str | None = None
) -> dict[str, str]:
    """Properties for `pyiceberg.catalog.load_catalog(name, **props)` (a RestCatalog).

    `credential` is "client_id:client_secret"; None when the server runs with auth none.
    """
    properties = {"type": "rest", "uri": uri.rstrip("/")}
    if credential:
        properties["credential"] = credential
        properties["oauth2-server-uri"] = token_endpoint(uri)
    if warehouse:
        properties["warehouse"] = warehouse
    return properties


def spark_catalog_properties(
    uri: str, credential: str | None, warehouse: str | None = None
) -> dict[str, str]:
    """Iceberg catalog properties for Spark, to pass to `register_catalog(spark, name, props)`."""
    properties = {"type": "rest", "uri": uri.rstrip("/"), "io-impl": HADOOP_FILE_IO}
    if credential:
        properties["rest.auth.type"] = "oauth2"
        properties["credential"] = credential
        properties["oauth2-server-uri"] = token_endpoint(uri)
        properties["scope"] = "catalog"
    if warehouse:
        properties["warehouse"] = warehouse
    return properties

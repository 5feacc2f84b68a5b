"""Shared test fixtures.

Fixtures that start real servers live in tests/fixtures/ (one module per
component) and are session-scoped: one broker, one registry, one catalog server
and one Spark JVM serve the whole run. Each test isolates itself with unique
topic, namespace and table names.
"""

from hypothesis import settings

# No per-example deadline: the suite shares two cores with its servers, and a property
# is about what a function returns, not how fast one example ran (a 200-ms deadline
# failed `test_distinct_is_numpys_unique` at load 11).
settings.register_profile("tableflow", deadline=None)
settings.load_profile("tableflow")

pytest_plugins = [
    "tests.fixtures.kafka_server",
    "tests.fixtures.stack",
    "tests.fixtures.apicurio",
    "tests.fixtures.catalog",
    "tests.fixtures.spark",
    "tests.fixtures.s3",
    "tests.fixtures.s3_catalog",
    "tests.fixtures.trino",
    "tests.fixtures.nessie",
    "tests.fixtures.lake",
    "tests.fixtures.projects",
    "tests.fixtures.apply_env",
    "tests.fixtures.postgres",
    "tests.fixtures.prometheus",
    "tests.fixtures.slow_first",
]

"""Spark's Python worker daemon, with the modules tableflow's tasks use imported first.

Spark forks every Python worker from one daemon process (`spark.python.daemon.module`,
set by `engine/spark_session.py`). Workers forked from this daemon inherit the decode
path already imported (pyarrow, confluent-kafka, fastavro, the config models the task
closures reference) instead of each importing it again: measured ~1.5 s of CPU per
worker on the 2-core machine, paid once per Spark application here.

Spark puts its zipped copies of pyspark and py4j (`python/lib/*.zip`) and its own
spark-core jar first on the workers' path. pyspark's worker calls
`importlib.invalidate_caches()` before every task, and on Python 3.10+ that makes every
zip importer (one per archive, and one per package directory looked up in it) read its
archive's directory again: over half the workers' CPU in a 20-table apply. When the zip
holds the same pyspark as the installed package the driver runs, the daemon imports the
installed one instead and forgets those archives (`drop_zipped_spark_python`).
"""

from __future__ import annotations

import gc
import re
import sys
import zipfile
from collections.abc import MutableMapping
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

ZIPPED_PACKAGES = re.compile(r"^(pyspark\.zip|py4j-[\w.]+-src\.zip)$")
VERSION = re.compile(r"""__version__(?:\s*:\s*str)?\s*=\s*['"]([^'"]+)['"]""")


def drop_zipped_spark_python(path: list[str]) -> list[str]:
    """`path` without Spark's zipped pyspark and py4j and the jars of its own `jars/`
    directory, if the rest of `path` has the same pyspark installed (and a py4j); else
    `path` unchanged. Jars from elsewhere (`--packages` may ship Python code) stay."""
    zips = [entry for entry in path if ZIPPED_PACKAGES.match(Path(entry).name)]
    pyspark_zip = next((entry for entry in zips if Path(entry).name == "pyspark.zip"), None)
    if pyspark_zip is None:
        return path
    spark_home = Path(pyspark_zip).parent.parent.parent  # <home>/python/lib/pyspark.zip
    spark_jars = [entry for entry in path if Path(entry).parent == spark_home / "jars"]
    rest = [entry for entry in path if entry not in zips and entry not in spark_jars]
    if PathFinder.find_spec("py4j", rest) is None:
        return path
    zipped, installed = zipped_pyspark_version(pyspark_zip), installed_pyspark_version(rest)
    return rest if zipped is not None and zipped == installed else path


def forget_importers(dropped: list[str], cache: MutableMapping[str, Any]) -> None:
    """Drop the cached importers of the `dropped` path entries and of the package
    directories looked up inside them (`<archive>/<package>`)."""
    for key in list(cache):
        if any(key == entry or key.startswith(entry + "/") for entry in dropped):
            del cache[key]


def zipped_pyspark_version(archive: str) -> str | None:
    try:
        with zipfile.ZipFile(archive) as zipped:
            return _version(zipped.read("pyspark/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def installed_pyspark_version(path: list[str]) -> str | None:
    spec = PathFinder.find_spec("pyspark", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        return _version(version_file.read_text())
    except OSError:
        return None


def _version(source: str) -> str | None:
    match = VERSION.search(source)
    return match.group(1) if match else None


if __name__ == "__main__":
    kept = drop_zipped_spark_python(sys.path)
    forget_importers([entry for entry in sys.path if entry not in kept], sys.path_importer_cache)
    sys.path[:] = kept

    import pyarrow
    from pyspark.daemon import manager

    import tableflow_core.kafka.range_reader
    import tableflow_core.pipeline.runners.decode
    import tableflow_core.schemas.decoding  # noqa: F401

    # pyarrow imports pandas on its first `pa.array` (to recognise pandas objects): do it
    # once here rather than in every forked worker (~0.7 s of CPU each).
    pyarrow.array([0])
    # The imported modules' objects out of the collector's reach: a forked worker's
    # collections would otherwise write to every one of them (their GC headers), copying
    # the daemon's pages into each worker.
    gc.collect()
    gc.freeze()
    manager()

"""The Python worker daemon imports the installed pyspark instead of Spark's zipped copies
(whose importers pyspark's worker makes re-read their archives before every task)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tableflow_core.pipeline.worker_daemon import drop_zipped_spark_python, forget_importers


def spark_home(root: Path, zipped_version: str) -> Path:
    home = root / "spark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "jars").mkdir()
    with zipfile.ZipFile(home / "python" / "lib" / "pyspark.zip", "w") as archive:
        archive.writestr("pyspark/version.py", f'__version__: str = "{zipped_version}"\n')
    (home / "python" / "lib" / "py4j-0.10.9.7-src.zip").write_bytes(b"")
    return home


def installed(root: Path, version: str) -> Path:
    site = root / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "pyspark" / "version.py").write_text(f'__version__: str = "{version}"\n')
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")
    return site


def worker_path(home: Path, site: Path, *extra: str) -> list[str]:
    lib = home / "python" / "lib"
    return [
        "/project",
        str(lib / "pyspark.zip"),
        str(lib / "py4j-0.10.9.7-src.zip"),
        str(home / "jars" / "spark-core_2.12-3.5.9.jar"),
        *extra,
        str(site),
    ]


def test_the_same_pyspark_installed_replaces_the_zips_and_sparks_own_jars(tmp_path: Path) -> None:
    home, site = spark_home(tmp_path, "3.5.9"), installed(tmp_path, "3.5.9")
    package_jar = str(tmp_path / "ivy" / "graphframes.jar")  # --packages may ship Python
    path = worker_path(home, site, package_jar)
    assert drop_zipped_spark_python(path) == ["/project", package_jar, str(site)]


def test_another_pyspark_version_keeps_the_zips(tmp_path: Path) -> None:
    home, site = spark_home(tmp_path, "3.5.1"), installed(tmp_path, "3.5.9")
    path = worker_path(home, site)
    assert drop_zipped_spark_python(path) == path


def test_without_an_installed_pyspark_the_zips_stay(tmp_path: Path) -> None:
    home = spark_home(tmp_path, "3.5.9")
    path = worker_path(home, tmp_path / "empty")
    assert drop_zipped_spark_python(path) == path
    assert drop_zipped_spark_python(["/project"]) == ["/project"]


def test_the_importers_of_dropped_archives_are_forgotten() -> None:
    cache: dict[str, object] = {
        "/s/python/lib/pyspark.zip": 1,
        "/s/python/lib/pyspark.zip/pyspark/sql": 2,
        "/s/jars/spark-core.jar/org": 3,
        "/s/python/lib/pyspark.zipper": 4,
        "/site-packages": 5,
    }
    forget_importers(["/s/python/lib/pyspark.zip", "/s/jars/spark-core.jar"], cache)
    assert cache == {"/s/python/lib/pyspark.zipper": 4, "/site-packages": 5}

"""The address the driver JVM binds its listeners to (SPARK_LOCAL_IP), by master and conf."""

from __future__ import annotations

from tableflow_core.engine.spark_session import driver_local_ip


def test_local_master_binds_loopback() -> None:
    assert driver_local_ip("local[*]", {}, {}) == "127.0.0.1"


def test_the_users_own_spark_local_ip_is_kept() -> None:
    environ = {"SPARK_LOCAL_IP": "10.0.0.9"}
    assert driver_local_ip("local[2]", {}, environ) is None
    assert (
        driver_local_ip("spark://10.0.0.5:7077", {"spark.driver.host": "10.0.0.7"}, environ) is None
    )


def test_a_cluster_driver_binds_the_address_the_target_gives_it() -> None:
    master = "spark://10.0.0.5:7077"
    assert driver_local_ip(master, {"spark.driver.host": "10.0.0.7"}, {}) == "10.0.0.7"
    both = {"spark.driver.host": "gateway.example", "spark.driver.bindAddress": "10.0.0.7"}
    assert driver_local_ip(master, both, {}) == "10.0.0.7"


def test_a_cluster_driver_without_an_address_is_left_to_spark() -> None:
    assert driver_local_ip("spark://10.0.0.5:7077", {}, {}) is None
    assert driver_local_ip("yarn", {"spark.executor.memory": "4g"}, {}) is None

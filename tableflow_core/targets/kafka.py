"""Target Kafka settings -> a librdkafka (confluent-kafka) consumer configuration."""

from __future__ import annotations

from tableflow_core.config.models.targets import KafkaConnection


def kafka_consumer_config(kafka: KafkaConnection) -> dict[str, str]:
    """bootstrap, TLS/SASL settings and the user's extra properties, as librdkafka keys.

    Contains secrets (sasl.password): never print it.
    """
    conf = kafka_connection_config(kafka)
    for key, value in kafka.config.items():
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


def kafka_connection_config(kafka: KafkaConnection) -> dict[str, str]:
    """bootstrap and TLS/SASL settings only: what an admin client or a producer needs
    (the extra properties are a consumer's). Contains secrets: never print it."""
    security = kafka.security
    conf: dict[str, str] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "security.protocol": security.protocol,
    }
    optional = {
        "sasl.mechanism": security.sasl_mechanism,
        "sasl.username": security.sasl_username,
        "sasl.password": security.sasl_password.get_secret_value()
        if security.sasl_password
        else None,
        "ssl.ca.location": security.ssl_ca_location,
        "ssl.certificate.location": security.ssl_certificate_location,
        "ssl.key.location": security.ssl_key_location,
        "ssl.key.password": security.ssl_key_password.get_secret_value()
        if security.ssl_key_password
        else None,
    }
    conf.update({k: v for k, v in optional.items() if v is not None})
    return conf

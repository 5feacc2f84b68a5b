"""Development Schema Registry speaking the Confluent Schema Registry REST API.

Production deployments point tableflow at Confluent Schema Registry, Karapace,
Redpanda or Apicurio; this server exists so the local stack and the tests have a
real HTTP registry that confluent-kafka's client and serializers use unchanged.

Modules: `errors` (Confluent error codes), `schemas` (parsing and canonical forms),
`compatibility` (pure Avro compatibility rules), `store` (SQLite persistence),
`service` (the registry's operations), `app` (HTTP routes), `server` (`main()`).
"""

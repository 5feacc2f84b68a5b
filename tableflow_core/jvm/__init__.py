"""JVM components: the Maven Central artifact cache (pinned locks), finding a JDK by
version, and class-data sharing archives. Used by the Spark engine (its jars and
driver JVM) and by the local stack's Java servers (Kafka, s3proxy, Apicurio)."""

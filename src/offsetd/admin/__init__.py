"""Client-side operator tools built on confluent-kafka and kafka-python (work against any Kafka cluster)."""

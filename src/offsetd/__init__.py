"""offsetd: a Kafka-wire-compatible broker built around consumer offset management."""

__version__ = "0.1.0"

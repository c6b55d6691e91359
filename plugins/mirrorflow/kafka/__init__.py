"""Kafka mechanics: clients, admin verbs, internal-topic readers, the flow lease and heartbeats."""

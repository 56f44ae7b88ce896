"""Capture: PostgreSQL logical replication into a Debezium-format changelog."""

"""Verify: output Delta versions against the same SQL on PostgreSQL."""

"""The Debezium formats every stage shares: event envelopes, column values,
LSN text, record payloads and topic names (shared/docs/protocol.md).

Capture writes them, the changelog stores them, decode and the join stage
read them, verify replays them. This package knows no stage.
"""

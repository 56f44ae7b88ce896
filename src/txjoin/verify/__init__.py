"""Verify: output Delta versions against the same SQL run by PostgreSQL
(the oracle), at the cut each version records."""

"""The property-based regression suite: random transactions through the whole
pipeline, every Delta version compared with PostgreSQL (``txjoin check``)."""

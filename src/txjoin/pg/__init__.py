"""PostgreSQL-facing helpers: the embedded server, names, and source checks."""

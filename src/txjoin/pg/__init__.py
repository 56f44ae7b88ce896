"""PostgreSQL-facing helpers: connections, names, column types, table
descriptions from the catalog, source checks and set-up, the embedded server."""

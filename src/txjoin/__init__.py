"""txjoin: joined tables from PostgreSQL change streams, consistent at every version.

Change events (Debezium format, with transaction metadata) are assembled into
whole transactions, released in commit order, and joined incrementally into
Delta tables whose every version equals the pipeline's SQL on the source at
one commit.
"""

from txjoin.errors import TxJoinError

__version__ = "0.1.0"

__all__ = ["TxJoinError", "__version__"]

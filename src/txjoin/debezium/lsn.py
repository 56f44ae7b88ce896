"""PostgreSQL's text form of an LSN (``X/XXXXXXXX``), as slots, pgoutput and
messages show it; txjoin keeps LSNs as integers everywhere else."""

from __future__ import annotations

from txjoin.errors import ProtocolError

__all__ = ["format_lsn", "parse_lsn"]


def format_lsn(lsn: int) -> str:
    """PostgreSQL's text form of an LSN: ``X/XXXXXXXX``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:08X}"


def parse_lsn(text: str) -> int:
    hi, sep, lo = text.partition("/")
    try:
        if not sep:
            raise ValueError
        return (int(hi, 16) << 32) | int(lo, 16)
    except ValueError:
        raise ProtocolError(f"{text!r} is not an LSN (expected X/XXXXXXXX)") from None

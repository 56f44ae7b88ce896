"""PostgreSQL's numeric division, exactly (src/backend/utils/adt/numeric.c).

A quotient's scale depends on its operands' values: ``select_div_scale``
aims for at least 16 significant digits (``NUMERIC_MIN_SIG_DIGITS``) and
never fewer fractional digits than either operand's display scale, and
``div_var`` rounds half away from zero at that scale. ``avg`` over integers
and numeric is the same division of the sum by the count. A Delta decimal
column has one scale, so the planner accepts a numeric quotient only where
the SQL rounds it to a fixed scale (``round(a / b, k)``, ``(a / b)::numeric(p, s)``):
:func:`div_round` computes PostgreSQL's quotient, then that rounding, as the
Spark UDF ``txj_div_round``.
"""

from __future__ import annotations

from decimal import Decimal

from txjoin.errors import TxJoinError

__all__ = ["UDF_NAME", "div_round", "div_scale", "pg_div", "register"]

UDF_NAME = "txj_div_round"
_MIN_SIG_DIGITS = 16  # NUMERIC_MIN_SIG_DIGITS
_DEC_DIGITS = 4  # decimal digits per base-10000 digit (NBASE = 10000)
_MAX_DISPLAY_SCALE = 1000


class NumericError(TxJoinError):
    """A division PostgreSQL rejects (by zero): the batch stops as PostgreSQL's query would."""


def _weight_and_first(x: Decimal) -> tuple[int, int]:
    """``(weight, first base-10000 digit)`` of |x| as PostgreSQL stores it; (0, 0) for zero."""
    if x == 0:
        return 0, 0
    x = abs(x)
    weight = x.adjusted() // _DEC_DIGITS  # the base-10000 group holding the leading digit
    first = int(x.scaleb(-_DEC_DIGITS * weight)) % 10**_DEC_DIGITS
    return weight, first


def div_scale(x: Decimal, y: Decimal, dx: int, dy: int) -> int:
    """select_div_scale: the result scale of ``x / y`` for display scales ``dx``, ``dy``."""
    w1, f1 = _weight_and_first(x)
    w2, f2 = _weight_and_first(y)
    qweight = w1 - w2
    if f1 <= f2:
        qweight -= 1
    rscale = _MIN_SIG_DIGITS - qweight * _DEC_DIGITS
    rscale = max(rscale, dx, dy, 0)
    return min(rscale, _MAX_DISPLAY_SCALE)


def _round_half_away(num: int, den: int) -> int:
    """num / den rounded half away from zero (den > 0)."""
    q, r = divmod(abs(num), den)
    if 2 * r >= den:
        q += 1
    return q if num >= 0 else -q


def pg_div(x: Decimal, y: Decimal, dx: int, dy: int) -> Decimal:
    """``x / y`` as PostgreSQL's numeric division computes it, exactly."""
    if y == 0:
        raise NumericError("division by zero")
    scale = div_scale(x, y, dx, dy)
    # x / y * 10^scale, as a ratio of integers, rounded once.
    sx, sy = x.as_tuple(), y.as_tuple()
    xi, ex = int(x.scaleb(-int(sx.exponent))), int(sx.exponent)
    yi, ey = int(y.scaleb(-int(sy.exponent))), int(sy.exponent)
    shift = scale + ex - ey
    num, den = (xi * 10**shift, yi) if shift >= 0 else (xi, yi * 10**-shift)
    if den < 0:
        num, den = -num, -den
    return Decimal(_round_half_away(num, den)).scaleb(-scale)


def div_round(x: str | None, y: str | None, dx: int, dy: int, k: int) -> str | None:
    """``round(x / y, k)`` as PostgreSQL computes it: the quotient at its own
    scale, then rounded half away from zero to ``k`` digits. Text in and out,
    so no digit is lost on the way through Spark."""
    if x is None or y is None:
        return None
    q = pg_div(Decimal(x), Decimal(y), dx, dy)
    exponent = int(q.as_tuple().exponent)
    if -exponent <= k:
        return format(q, "f")
    digits = int(q.scaleb(-exponent))
    r = Decimal(_round_half_away(digits, 10 ** (-exponent - k))).scaleb(-k)
    return format(r, "f")


def register(spark: object) -> None:
    """Register :data:`UDF_NAME` on a Spark session (idempotent)."""
    from pyspark.sql.functions import udf

    fn = udf(div_round, "string", useArrow=True)
    spark.udf.register(UDF_NAME, fn)  # type: ignore[attr-defined]

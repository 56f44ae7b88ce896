"""PostgreSQL's numeric division, checked against values PostgreSQL 15 prints
(the conformance suite checks the same against a live server)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from txjoin.join.pgnumeric import NumericError, div_round, pg_div


@pytest.mark.parametrize(
    ("x", "y", "dx", "dy", "printed"),
    [
        ("1", "3.0", 0, 1, "0.33333333333333333333"),  # SELECT 1/3.0
        ("10", "4.0", 0, 1, "2.5000000000000000"),  # SELECT 10/4.0
        ("4.18", "1.19", 2, 2, "3.5126050420168067"),  # SELECT 4.18/1.19
        ("2", "3", 0, 0, "0.66666666666666666667"),  # SELECT 2::numeric/3
        ("-2", "3", 0, 0, "-0.66666666666666666667"),  # half away from zero, both signs
        ("123456789", "0.001", 0, 3, "123456789000.00000000"),  # SELECT 123456789/0.001
        ("0", "7", 0, 0, "0.00000000000000000000"),  # SELECT 0::numeric/7
        ("1.00000000000000000000000", "3", 23, 0, "0.33333333333333333333333"),  # the dividend's scale wins
    ],
)
def test_quotients_have_postgresql_digits(x: str, y: str, dx: int, dy: int, printed: str) -> None:
    assert format(pg_div(Decimal(x), Decimal(y), dx, dy), "f") == printed


def test_rounding_applies_to_the_quotient_as_postgresql_computed_it() -> None:
    # round(2/3::numeric, 6) = 0.666667; the quotient is rounded at 20 digits first.
    assert div_round("2", "3", 0, 0, 6) == "0.666667"
    assert div_round("-1", "8", 0, 0, 2) == "-0.13"  # -0.125 -> half away from zero
    assert div_round(None, "3", 0, 0, 2) is None
    with pytest.raises(NumericError, match="division by zero"):
        div_round("1", "0", 0, 0, 2)

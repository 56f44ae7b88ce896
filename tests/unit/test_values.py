"""PostgreSQL text output -> Debezium JSON values, and back for the join stage."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from txjoin.debezium.values import arrow_type, from_debezium, parse_array_literal, spark_type_ddl, to_debezium
from txjoin.errors import ProtocolError
from txjoin.pg.types import ColumnType

INT4 = ColumnType(23, "int4")
INT8 = ColumnType(20, "int8")


def numeric(p: int, s: int) -> ColumnType:
    return ColumnType(1700, "numeric", ((p << 16) | s) + 4)


@pytest.mark.parametrize(
    ("col", "text", "expected"),
    [
        (ColumnType(21, "int2"), "-32768", -32768),
        (INT4, "2147483647", 2147483647),
        (INT8, "-9223372036854775808", -9223372036854775808),
        (numeric(12, 2), "-12345678.90", "-12345678.90"),
        (ColumnType(1700, "numeric"), "3.14159265358979323846264338327950288", "3.14159265358979323846264338327950288"),
        (ColumnType(1700, "numeric"), "NaN", "NaN"),
        (ColumnType(700, "float4"), "1.5", 1.5),
        (ColumnType(701, "float8"), "-Infinity", "-Infinity"),
        (ColumnType(701, "float8"), "1e-300", 1e-300),
        (ColumnType(16, "bool"), "t", True),
        (ColumnType(16, "bool"), "f", False),
        (ColumnType(25, "text"), "héllo\nwörld", "héllo\nwörld"),
        (ColumnType(1042, "bpchar", 7), "ab ", "ab "),
        (ColumnType(2950, "uuid"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (ColumnType(3802, "jsonb"), '{"a": [1, null]}', '{"a": [1, null]}'),
        (ColumnType(1082, "date"), "1970-01-02", 1),
        (ColumnType(1082, "date"), "1969-12-31", -1),
        (ColumnType(1082, "date"), "infinity", None),
        (ColumnType(1114, "timestamp"), "2023-09-23 20:05:00", 1695499500000000),
        (ColumnType(1114, "timestamp"), "1969-12-31 23:59:59.999999", -1),
        (ColumnType(1114, "timestamp"), "2023-09-23 20:05:00.5", 1695499500500000),
        (ColumnType(1184, "timestamptz"), "2023-09-23 21:00:00+02", "2023-09-23T19:00:00Z"),
        (ColumnType(1184, "timestamptz"), "2023-09-23 21:00:00.123+05:30", "2023-09-23T15:30:00.123Z"),
        (ColumnType(1184, "timestamptz"), "2023-09-23 19:00:00.000001+00", "2023-09-23T19:00:00.000001Z"),
        # PostgreSQL drops a fraction's trailing zeros; text that keeps them still converts.
        (ColumnType(1184, "timestamptz"), "2023-09-23 19:00:00.500+00", "2023-09-23T19:00:00.5Z"),
        (ColumnType(1184, "timestamptz"), "2023-09-23 19:00:00.000000+00", "2023-09-23T19:00:00Z"),
        # Years before 1000 keep four digits (glibc's strftime %Y would write '361').
        (ColumnType(1184, "timestamptz"), "0361-11-23 12:34:50.5+00", "0361-11-23T12:34:50.5Z"),
        (ColumnType(1083, "time"), "01:02:03.000004", 3723000004),
        (ColumnType(1083, "time"), "24:00:00", 86400000000),
        (ColumnType(17, "bytea"), "\\x", ""),
        (ColumnType(17, "bytea"), "\\x00ff10", "AP8Q"),
        (ColumnType(1007, "_int4"), "{1,NULL,-3}", [1, None, -3]),
        (ColumnType(1007, "_int4"), "{}", []),
        (ColumnType(1007, "_int4"), "[0:1]={5,6}", [5, 6]),
        (ColumnType(1009, "_text"), '{plain,"with space","q\\"uote","back\\\\slash","NULL",NULL,"a,b","{}"}',
         ["plain", "with space", 'q"uote', "back\\slash", "NULL", None, "a,b", "{}"]),
        (ColumnType(1231, "_numeric"), "{1.5,NaN}", ["1.5", "NaN"]),
        (ColumnType(1000, "_bool"), "{t,f}", [True, False]),
        (ColumnType(99999, "mood"), "happy", "happy"),  # unknown types: their text
    ],
)  # fmt: skip
def test_to_debezium(col: ColumnType, text: str, expected: object) -> None:
    assert to_debezium(text, col) == expected


def test_null_is_none_for_every_type() -> None:
    for col in (INT4, numeric(5, 2), ColumnType(1009, "_text"), ColumnType(1184, "timestamptz")):
        assert to_debezium(None, col) is None


@pytest.mark.parametrize(
    ("col", "text", "fragment"),
    [
        (INT4, "12x", "int4"),
        (ColumnType(1082, "date"), "2023-13-01", "date"),
        (ColumnType(1082, "date"), "0044-03-15 BC", "years 1..9999"),
        (ColumnType(17, "bytea"), "deadbeef", "hex format"),
        (ColumnType(1007, "_int4"), "{{1,2},{3,4}}", "multi-dimensional"),
        (ColumnType(1009, "_text"), '{"open}', "unterminated"),
        (ColumnType(1007, "_int4"), "1,2", "starts with"),
    ],
)
def test_malformed_text_names_type_and_value(col: ColumnType, text: str, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment) as err:
        to_debezium(text, col)
    assert col.name in str(err.value)


def test_numeric_typmod_precision_and_scale() -> None:
    assert numeric(12, 2).numeric_precision_scale == (12, 2)
    assert ColumnType(1700, "numeric").numeric_precision_scale is None
    negative = ColumnType(1700, "numeric", ((5 << 16) | (0x10000 - 2)) + 4)
    assert negative.numeric_precision_scale == (5, -2)


@pytest.mark.parametrize(
    ("col", "text", "python", "arrow"),
    [
        (INT4, "7", 7, pa.int32()),
        (numeric(10, 2), "12.50", Decimal("12.50"), pa.decimal128(10, 2)),
        (ColumnType(1700, "numeric"), "1.000000000000000000000000000000000000001", "1.000000000000000000000000000000000000001", pa.string()),
        (ColumnType(1082, "date"), "1999-12-31", dt.date(1999, 12, 31), pa.date32()),
        (ColumnType(1114, "timestamp"), "2023-09-23 20:05:00.25", dt.datetime(2023, 9, 23, 20, 5, 0, 250000), pa.timestamp("us")),
        (ColumnType(1184, "timestamptz"), "2023-09-23 21:00:00+02", dt.datetime(2023, 9, 23, 19, tzinfo=dt.UTC), pa.timestamp("us", tz="UTC")),
        (ColumnType(1083, "time"), "13:14:15.5", dt.time(13, 14, 15, 500000), pa.time64("us")),
        (ColumnType(17, "bytea"), "\\xcafe", b"\xca\xfe", pa.binary()),
        (ColumnType(1007, "_int4"), "{1,NULL}", [1, None], pa.list_(pa.int32())),
        (ColumnType(16, "bool"), "t", True, pa.bool_()),
        (ColumnType(701, "float8"), "2.5", 2.5, pa.float64()),
    ],
)  # fmt: skip
def test_from_debezium_round_trip_fits_arrow_type(
    col: ColumnType, text: str, python: object, arrow: pa.DataType
) -> None:
    value = from_debezium(to_debezium(text, col), col)
    assert value == python
    assert arrow_type(col) == arrow
    assert pa.array([value], type=arrow_type(col)).to_pylist() == [python]


def test_spark_types() -> None:
    assert spark_type_ddl(numeric(10, 2)) == "DECIMAL(10,2)"
    assert spark_type_ddl(ColumnType(1114, "timestamp")) == "TIMESTAMP_NTZ"
    assert spark_type_ddl(ColumnType(1184, "timestamptz")) == "TIMESTAMP_LTZ"
    assert spark_type_ddl(ColumnType(1007, "_int4")) == "ARRAY<INT>"
    assert spark_type_ddl(ColumnType(25, "text")) == "STRING"


def test_array_literal_parser_edge_cases() -> None:
    assert parse_array_literal('{"",""}') == ["", ""]
    assert parse_array_literal('{" "}') == [" "]
    assert parse_array_literal("{NULL}") == [None]
    assert parse_array_literal('{"NULL"}') == ["NULL"]

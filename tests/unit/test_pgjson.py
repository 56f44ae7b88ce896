"""txjoin's jsonb -> and ->> (txjoin.join.pgjson) on jsonb's printed text; the
conformance suite compares the same with PostgreSQL through Spark."""

from __future__ import annotations

import pytest

from txjoin.join.pgjson import jsonb_get

DOC = '{"k": "v\\n\\"q\\u0001", "n": 1.50, "o": {"x y": [1, "é", null, true]}, "z": null}'


@pytest.mark.parametrize(
    ("doc", "key", "index", "as_text", "expected"),
    [
        (DOC, "k", None, True, 'v\n"q\x01'),
        (DOC, "k", None, False, '"v\\n\\"q\\u0001"'),
        (DOC, "n", None, True, "1.50"),  # numbers keep their printed digits
        (DOC, "o", None, False, '{"x y": [1, "é", null, true]}'),
        (DOC, "z", None, True, None),  # a JSON null is SQL NULL as text
        (DOC, "z", None, False, "null"),
        (DOC, "missing", None, True, None),
        (DOC, None, 0, True, None),  # an index of an object
        ('[1, "s", 1000, -0.001]', None, -1, True, "-0.001"),
        ('[1, "s"]', None, 2, True, None),
        ('[1, "s"]', "k", None, True, None),  # a key of an array
        ('"x"', None, 0, False, '"x"'),  # a scalar is a one-element array
        ('"x"', None, -1, True, "x"),
        ('"x"', "k", None, True, None),
        (None, "k", None, True, None),
    ],
)
def test_jsonb_get_reads_jsonb_as_postgresql(
    doc: str | None, key: str | None, index: int | None, as_text: bool, expected: str | None
) -> None:
    assert jsonb_get(doc, key, index, as_text) == expected

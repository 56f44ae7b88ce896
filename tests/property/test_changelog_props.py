"""Any sequence of appends, flushes and reopenings reads back exactly the
flushed records, in order, with contiguous offsets per topic."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.changelog import ChangelogReader, SegmentChangelog

TOPICS = ["s.public.a", "s.public.b", "s.transaction"]
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"), st.sampled_from(TOPICS), st.binary(max_size=20).map(lambda b: b.hex().encode())
        ),
        st.tuples(st.just("flush"), st.none(), st.none()),
        st.tuples(st.just("reopen"), st.none(), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=examples(ci=100, thorough=1000))
@given(ops)
def test_reads_back_exactly_the_flushed_records(script: list[tuple[str, str | None, bytes | None]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        w = SegmentChangelog(root)
        durable: dict[str, list[bytes]] = {t: [] for t in TOPICS}
        pending: dict[str, list[bytes]] = {t: [] for t in TOPICS}
        for op, topic, value in script:
            if op == "append":
                assert topic is not None
                assert value is not None
                offset = w.append(topic, value)
                assert offset == len(durable[topic]) + len(pending[topic])
                pending[topic].append(value)
            elif op == "flush":
                w.flush()
                for t in TOPICS:
                    durable[t] += pending[t]
                    pending[t] = []
            else:  # close without flushing: pending records are lost
                w.close()
                pending = {t: [] for t in TOPICS}
                w = SegmentChangelog(root)
        w.close()
        reader = ChangelogReader(root)
        for t in TOPICS:
            assert [v for _, v in reader.read(t)] == durable[t]
            assert [o for o, _ in reader.read(t)] == list(range(len(durable[t])))

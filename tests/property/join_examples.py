"""Cases the join property test failed on once, kept as regression examples.

Each entry names what it found. They run first in every profile.
"""

from __future__ import annotations

from tests.property.join_strategies import Case, Link, Schema, TxPlan

PINNED: list[tuple[str, Case]] = []

# A three-column output key: the MERGE predicate's conjuncts were not
# parenthesized and DataFusion parsed `a IS NOT DISTINCT FROM b AND c ...`
# as `a IS NOT DISTINCT FROM (b AND c)` ("Int32 AND Boolean").
PINNED.append(
    (
        "merge predicate precedence",
        Case(
            schema=Schema(
                n=5,
                links=(
                    Link(near=0, far=1, down=True, outer=True, declared=True),
                    Link(near=0, far=2, down=False, outer=False, declared=False),
                    Link(near=1, far=3, down=True, outer=True, declared=False),
                    Link(near=1, far=4, down=False, outer=False, declared=False),
                ),
                kind="plain",
                ordered_agg=True,
                json_of=2,
                where="",
                full_identity=(True, True, True, False, True),
            ),
            initial=(
                (3, {"id": 6, "v": None, "g": None, "ref_t1": None}),
                (3, {"id": 6, "v": 4, "g": 0, "ref_t1": 2}),
                (3, {"id": 1, "v": None, "g": None, "ref_t1": None}),
                (3, {"id": 3, "v": -4, "g": None, "ref_t1": None}),
                (4, {"id": 1, "v": 5, "g": 0}),
                (4, {"id": 5, "v": 1, "g": None}),
                (4, {"id": 6, "v": None, "g": 1}),
            ),
            transactions=(
                TxPlan(ops=(("delete", 1, 3),)),
                TxPlan(ops=(("update_g", 3, 4, 2),)),
                TxPlan(ops=(("insert", 3, {"id": 1, "v": 2, "g": 2, "ref_t1": None}),)),
                TxPlan(
                    ops=(
                        ("update_v", 2, 1, 1),
                        ("insert", 1, {"id": 5, "v": None, "g": None, "ref_t0": 3, "ref_t4": 2}),
                        ("update_v", 1, 2, None),
                        ("update_ref", 3, 3, "ref_t1", None),
                    )
                ),
                TxPlan(
                    ops=(
                        ("insert", 4, {"id": 5, "v": None, "g": 0}),
                        ("delete", 1, 2),
                        ("update_g", 1, 3, None),
                        ("update_ref", 1, 5, "ref_t0", None),
                    )
                ),
                TxPlan(ops=(("update_g", 2, 2, None),)),
                TxPlan(ops=(("insert", 2, {"id": 2, "v": None, "g": 2}), ("update_ref", 1, 4, "ref_t0", 6))),
                TxPlan(ops=(("insert", 1, {"id": 2, "v": -4, "g": 0, "ref_t0": None, "ref_t4": None}),)),
                TxPlan(
                    ops=(
                        ("delete", 4, 2),
                        ("update_v", 3, 4, 1),
                        ("insert", 0, {"id": 4, "v": None, "g": 1, "ref_t2": None}),
                    )
                ),
                TxPlan(
                    ops=(
                        ("insert", 1, {"id": 2, "v": 4, "g": None, "ref_t0": 4, "ref_t4": None}),
                        ("insert", 3, {"id": 3, "v": None, "g": 0, "ref_t1": None}),
                        ("move_pk", 4, 2, 1),
                        ("insert", 2, {"id": 5, "v": 4, "g": None}),
                    )
                ),
            ),
            connections=2,
            schedule=(),
            triggers=frozenset({3, 4, 10}),
        ),
    )
)

# Empty views between non-empty ones: PySpark's createDataFrame dropped the
# record batches after an empty one, so the recompute's combined view lost
# t3's row and the output lost the joined row (SparkEngine._spark_frame).
PINNED.append(
    (
        "empty record batch in a recompute's views",
        Case(
            schema=Schema(
                n=4,
                links=(
                    Link(near=0, far=1, down=False, outer=True, declared=False),
                    Link(near=0, far=2, down=True, outer=True, declared=False),
                    Link(near=0, far=3, down=True, outer=False, declared=False),
                ),
                kind="plain",
                ordered_agg=False,
                json_of=1,
                where="",
                full_identity=(False, False, False, False),
            ),
            initial=(
                (3, {"id": 1, "v": None, "g": None, "ref_t0": 1}),
                (3, {"id": 1, "v": None, "g": None, "ref_t0": 1}),
            ),
            transactions=(TxPlan(ops=(("insert", 0, {"id": 1, "v": None, "g": None, "ref_t1": 1}),)),),
            connections=1,
            schedule=(),
            triggers=frozenset(),
        ),
    )
)

"""Plan an output: analyse its PostgreSQL SQL, decide how to maintain it, and
translate it for Spark.

An output is maintained by recomputing *partitions* of it: per micro-batch we
find the partitions the released changes can affect and re-run the SQL on
just the rows those partitions need. A partition is either one row of the
*root* table (``root`` mode: the table whose primary key the output key, or
GROUP BY, contains and which no outer join can null out), or one value of
GROUP BY columns of a single table (``group`` mode; one global group for an
aggregate without GROUP BY).

What cannot be maintained this way is refused with
:class:`~txjoin.errors.UnsupportedQuery` naming the construct: joins other
than inner and left, join conditions other than equality (or
``x = ANY(array)``), joins between columns whose types write equal values
differently, subqueries, set operations, window functions, ordered-set
aggregates, LIMIT, non-deterministic functions, tables that are not captured.

Translation is sqlglot's (PostgreSQL -> Spark) plus rewrites: deterministic
``json_agg`` / ``array_agg`` / ``string_agg``, ``json_build_object``,
``= ANY(array)``, and where the column types say Spark would compute a
different value, integer division, casts, ``round(float)`` and ``avg``
(docs/types.md).

Default deny: :mod:`.allowlist` lists every function, operator, cast,
aggregate and column type an output's SQL may use, with PostgreSQL's
semantics; anything else is refused when the spec loads.

Modules: :mod:`.model` (what callers consume), :mod:`.analysis`
(:func:`plan_output`), :mod:`.allowlist` (what the SQL may use, expression
types), :mod:`.typerules` (key spellings), :mod:`.translate` (Spark SQL).
"""

from txjoin.join.plan.analysis import plan_output
from txjoin.join.plan.model import Edge, OutputPlan, TableInfo
from txjoin.join.plan.typerules import NUMERIC_SCALE

__all__ = ["NUMERIC_SCALE", "Edge", "OutputPlan", "TableInfo", "plan_output"]

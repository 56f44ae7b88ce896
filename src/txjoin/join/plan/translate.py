"""Translate an analysed SELECT to Spark SQL: sqlglot (PostgreSQL -> Spark) plus
rewrites for what its Spark output lacks (``json_agg``, ``json_build_object``,
``array_agg`` and ``string_agg`` made deterministic, ``= ANY(array)``) and for
what Spark would compute differently for the operand types (docs/types.md).
"""

from __future__ import annotations

import functools
from typing import Any

from sqlglot import exp

from txjoin.faults import mutated
from txjoin.join.plan import jsontext
from txjoin.join.plan.allowlist import json_key, pg_type
from txjoin.join.plan.gate import case_mapping, enum_labels, quotient_scale
from txjoin.join.plan.model import Analysis, any_array, refuse
from txjoin.join.plan.typerules import (
    FLOAT_TYPES,
    INT_TYPES,
    NUMERIC_SCALE,
    SPARK_INT,
    base_type,
    cast_type,
)

__all__ = ["translate"]


def _lambda_v() -> exp.Lambda:
    return exp.Lambda(
        this=exp.Dot(this=exp.to_identifier("e"), expression=exp.to_identifier("v")),
        expressions=[exp.to_identifier("e")],
    )


def _agg_rewrite(node: exp.Expression, unordered: list[bool], output: str) -> exp.Expression:
    """json_agg / array_agg / string_agg -> deterministic Spark expressions.

    Elements are collected as (sort key, value) pairs and sorted: by the
    aggregate's ORDER BY, with PostgreSQL's NULL placement (ASC NULLS LAST,
    DESC NULLS FIRST unless written otherwise), or by the value itself when
    there is no ORDER BY (the output then compares as a multiset). Over no
    rows the result is NULL, as in PostgreSQL. ``agg(...) FILTER (WHERE c)``
    collects only the pairs whose row passes ``c`` (collect_list skips NULLs).
    """
    condition: exp.Expression | None = None
    if isinstance(node, exp.Filter) and isinstance(
        node.this, exp.JSONArrayAgg | exp.ArrayAgg | exp.GroupConcat
    ):
        where = node.expression
        condition = where.this if isinstance(where, exp.Where) else where
        node = node.this
    if not isinstance(node, exp.JSONArrayAgg | exp.ArrayAgg | exp.GroupConcat):
        return node
    fname = {exp.JSONArrayAgg: "json_agg", exp.ArrayAgg: "array_agg", exp.GroupConcat: "string_agg"}[
        type(node)
    ]
    inner = node.this
    order: exp.Order | None = None
    if isinstance(inner, exp.Order):
        order = inner
        inner = inner.this
    if node.args.get("distinct") or isinstance(inner, exp.Distinct):
        raise refuse(output, f"{fname}(DISTINCT ...)", "aggregate distinct values with GROUP BY first", node)
    value = inner
    if isinstance(node, exp.JSONArrayAgg) and order is None:
        return _json_agg_unordered(value, condition, unordered)
    if order is not None:
        k_struct, asc = _order_key(order, node, fname, output)
    else:
        if isinstance(node, exp.GroupConcat):
            raise refuse(
                output,
                "string_agg without ORDER BY",
                "its order is undefined in PostgreSQL, so no copy can match it: add ORDER BY inside the call",
                node,
            )
        unordered.append(True)
        k_struct = value.copy()
        asc = True
    pair: exp.Expression = exp.Anonymous(
        this="named_struct",
        expressions=[exp.Literal.string("k"), k_struct, exp.Literal.string("v"), value.copy()],
    )
    if condition is not None:
        pair = exp.If(this=condition.copy(), true=pair, false=exp.Null())
    collected = exp.Anonymous(this="collect_list", expressions=[pair])
    sorted_ = exp.Anonymous(this="sort_array", expressions=[collected, exp.Boolean(this=asc)])
    arr: exp.Expression = exp.Anonymous(this="transform", expressions=[sorted_, _lambda_v()])
    count: exp.Expression = exp.Anonymous(this="size", expressions=[collected.copy()])
    if isinstance(node, exp.JSONArrayAgg):
        result: exp.Expression = jsontext.agg_array(arr)  # elements are JSON text already
    elif isinstance(node, exp.GroupConcat):
        sep = node.args.get("separator") or exp.Literal.string(",")
        result = exp.Anonymous(this="array_join", expressions=[arr, sep.copy()])
        # string_agg skips NULL values: all-NULL input gives NULL too.
        count = _non_null_count(collected)
    else:
        result = arr
    return _null_if_empty(count, result)


def _null_if_empty(count: exp.Expression, result: exp.Expression) -> exp.Expression:
    """``result``, or NULL over no rows (as PostgreSQL's aggregates give)."""
    return exp.If(this=exp.EQ(this=count, expression=exp.Literal.number(0)), true=exp.Null(), false=result)


def _json_agg_unordered(
    value: exp.Expression, condition: exp.Expression | None, unordered: list[bool]
) -> exp.Expression:
    """json_agg without ORDER BY: its element texts are never NULL ('null' for a NULL value), so they
    are collected and sorted as they are: one copy of the element expression (often a long escape
    chain), not a (key, value) pair holding it twice."""
    unordered.append(True)
    elem: exp.Expression = exp.Coalesce(this=value.copy(), expressions=[exp.Literal.string("null")])
    if condition is not None:
        elem = exp.If(this=condition.copy(), true=elem, false=exp.Null())
    collected = exp.Anonymous(this="collect_list", expressions=[elem])
    sorted_ = exp.Anonymous(this="sort_array", expressions=[collected, exp.Boolean(this=True)])
    count = exp.Anonymous(this="size", expressions=[collected.copy()])
    return _null_if_empty(count, jsontext.agg_array(sorted_))


def _order_key(
    order: exp.Order, node: exp.Expression, fname: str, output: str
) -> tuple[exp.Expression, bool]:
    """The sort key of an aggregate's ORDER BY, as a struct placing NULLs as
    PostgreSQL does, and whether it sorts ascending."""
    keys = list(order.expressions)
    descs = {bool(k.args.get("desc")) for k in keys}
    if len(descs) > 1:
        raise refuse(
            output, f"a {fname} ORDER BY mixing ASC and DESC", "order by keys in one direction", node
        )
    asc = not descs.pop()
    fields: list[exp.Expression] = []
    for i, k in enumerate(keys):
        nulls_first = bool(k.args.get("nulls_first"))
        # sort_array puts false before true ascending, true first descending.
        flag_is_null = (asc and not nulls_first) or (not asc and nulls_first)
        flag: exp.Expression = exp.Is(this=k.this.copy(), expression=exp.Null())
        if not flag_is_null:
            flag = exp.Not(this=flag)
        fields += [exp.Literal.string(f"n{i}"), flag, exp.Literal.string(f"k{i}"), k.this.copy()]
    return exp.Anonymous(this="named_struct", expressions=fields), asc


def _non_null_count(collected: exp.Expression) -> exp.Expression:
    """How many of the collected (key, value) pairs have a non-NULL value."""
    not_null = exp.Lambda(
        this=exp.Not(
            this=exp.Is(
                this=exp.Dot(this=exp.to_identifier("e"), expression=exp.to_identifier("v")),
                expression=exp.Null(),
            )
        ),
        expressions=[exp.to_identifier("e")],
    )
    return exp.Anonymous(
        this="size", expressions=[exp.Anonymous(this="filter", expressions=[collected.copy(), not_null])]
    )


_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _case_rewrites(tree: exp.Expression, a: Analysis) -> None:
    """lower/upper under the C collation change ASCII letters only."""
    found = [n for n in tree.find_all(exp.Lower, exp.Upper) if case_mapping(n, a) == "ascii"]
    for node in reversed(found):
        src, dst = (_UPPER, _UPPER.lower()) if isinstance(node, exp.Lower) else (_UPPER.lower(), _UPPER)
        node.replace(
            exp.Anonymous(
                this="TRANSLATE",
                expressions=[node.this.copy(), exp.Literal.string(src), exp.Literal.string(dst)],
            )
        )


def _enum_rewrites(tree: exp.Expression, a: Analysis) -> None:
    """Order enums as declared: compare, sort and take min/max of the label's
    position in the enum's label list, and turn min/max back into the label."""
    actions: list[tuple[exp.Expression, list[exp.Expression], tuple[str, ...]]] = []
    for node in tree.find_all(exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between, exp.Min, exp.Max, exp.Ordered):
        if not isinstance(node, exp.Expression):
            continue
        if isinstance(node, exp.Between):
            operands = [node.this, node.args["low"], node.args["high"]]
        elif isinstance(node, exp.Min | exp.Max | exp.Ordered):
            operands = [node.this]
        else:
            operands = [node.this, node.expression]
        enum_t = next((t for t in (pg_type(o, a) for o in operands) if t and t.startswith("enum:")), None)
        if enum_t is not None:
            actions.append((node, operands, enum_labels(a, enum_t)))
    for node, operands, labels in reversed(actions):
        arr = exp.Array(expressions=[exp.Literal.string(label) for label in labels])
        for o in operands:
            position = exp.Anonymous(this="array_position", expressions=[arr.copy(), o.copy()])
            # Spark's array_position of NULL is not NULL: keep NULL as NULL.
            o.replace(
                exp.If(this=exp.Is(this=o.copy(), expression=exp.Null()), true=exp.Null(), false=position)
            )
        if isinstance(node, exp.Min | exp.Max):
            index = exp.Cast(this=node.copy(), to=exp.DataType.build("INT"))
            label = exp.Anonymous(this="element_at", expressions=[arr.copy(), index])
            # element_at(arr, NULL) is not NULL in Spark either.
            node.replace(
                exp.If(this=exp.Is(this=node.copy(), expression=exp.Null()), true=exp.Null(), false=label)
            )


def _is_inf(x: exp.Expression) -> exp.Expression:
    inf = exp.Cast(this=exp.Literal.string("Infinity"), to=exp.DataType.build("DOUBLE"))
    return exp.EQ(this=exp.Abs(this=x.copy()), expression=inf)


def _is_zero(x: exp.Expression) -> exp.Expression:
    return exp.EQ(this=x.copy(), expression=exp.Literal.number(0))


def _checked_float(node: Any, pg: str) -> exp.Expression:
    """Floating-point arithmetic that raises where PostgreSQL's does (float.c's
    float8_pl/mi/mul/div): an infinite result from finite operands is an
    overflow; for * and /, a zero result from non-zero operands an underflow.
    Operands are cast to the result type first: PostgreSQL computes real +
    integer in double precision, Spark in FLOAT."""
    spark_type = exp.DataType.build("FLOAT" if pg == "float4" else "DOUBLE")
    for side in ("this", "expression"):
        node.set(side, exp.Cast(this=node.args[side], to=spark_type.copy()))
    a, b = node.this, node.expression
    whens = [
        exp.If(
            this=exp.and_(_is_inf(node), exp.not_(exp.or_(_is_inf(a), _is_inf(b)))),
            true=exp.Anonymous(
                this="RAISE_ERROR", expressions=[exp.Literal.string("value out of range: overflow")]
            ),
        )
    ]
    if isinstance(node, exp.Mul | exp.Div):
        operands_zero = exp.or_(_is_zero(a), _is_zero(b)) if isinstance(node, exp.Mul) else _is_zero(a)
        whens.append(
            exp.If(
                this=exp.and_(_is_zero(node), exp.not_(operands_zero)),
                true=exp.Anonymous(
                    this="RAISE_ERROR", expressions=[exp.Literal.string("value out of range: underflow")]
                ),
            )
        )
    return exp.Paren(this=exp.Case(ifs=whens, default=node.copy()))


def _rint(x: exp.Expression) -> exp.Expression:
    """C's rint(): half to even, and negative values that round to zero give -0 (Spark's BROUND gives +0)."""
    rounded = exp.Anonymous(this="BROUND", expressions=[x.copy()])
    negative_zero = exp.Cast(this=exp.Literal.string("-0.0"), to=exp.DataType.build("DOUBLE"))
    return exp.Paren(
        this=exp.Case(
            ifs=[
                exp.If(
                    this=exp.and_(exp.LT(this=x.copy(), expression=exp.Literal.number(0)), _is_zero(rounded)),
                    true=negative_zero,
                )
            ],
            default=rounded.copy(),
        )
    )


def _find_quotients(tree: exp.Expression, a: Analysis) -> list[tuple[Any, tuple[int, int, int, int | None]]]:
    """Numeric quotients (``/`` and avg) with their operands' scales and the
    rounding their context applies (the allowlist accepts no others)."""
    found: list[tuple[Any, tuple[int, int, int, int | None]]] = []
    for node in tree.find_all(exp.Div, exp.Avg):
        if isinstance(node, exp.Avg) or pg_type(node, a) == "numeric":
            found.append((node, quotient_scale(node, a)))
    return found


def _rewrite_quotients(found: list[tuple[Any, tuple[int, int, int, int | None]]]) -> None:
    """``round(a / b, k)`` and ``(a / b)::numeric(p, k)`` -> PostgreSQL's
    quotient, rounded, computed by txjoin's UDF on the operands' text
    (txjoin.join.pgnumeric); avg(x) is sum(x) / count(x)."""
    from txjoin.join.pgnumeric import UDF_NAME

    for node, (dx, dy, k, precision) in reversed(found):
        if isinstance(node, exp.Avg):
            inner = node.this
            arg = inner.expressions[0] if isinstance(inner, exp.Distinct) else inner
            # Sums of integers as numeric (no bigint overflow); numeric(p,s) sums keep their type.
            as_dec = arg.copy() if dx else exp.Cast(this=arg.copy(), to=exp.DataType.build("DECIMAL(38, 0)"))
            wrap = (
                (lambda e: exp.Distinct(expressions=[e]))
                if isinstance(inner, exp.Distinct)
                else (lambda e: e)
            )
            x: exp.Expression = exp.Sum(this=wrap(as_dec))
            y: exp.Expression = exp.Count(this=wrap(arg.copy()))
        else:
            x, y = node.this.copy(), node.expression.copy()
        text: list[exp.Expression] = [exp.Cast(this=e, to=exp.DataType.build("STRING")) for e in (x, y)]
        guard = _guard(node)
        if guard is not None:  # Spark runs a UDF on every row, whatever CASE or FILTER decides
            text = [exp.Case(ifs=[exp.If(this=guard.copy(), true=t)]) for t in text]
        call = exp.Anonymous(
            this=UDF_NAME,
            expressions=[*text, exp.Literal.number(dx), exp.Literal.number(dy), exp.Literal.number(k)],
        )
        target = node.parent
        while isinstance(target, exp.Paren):
            target = target.parent
        result = exp.Cast(this=call, to=exp.DataType.build(f"DECIMAL({precision or 38}, {k})"))
        target.replace(result)


def _guard(node: exp.Expression) -> exp.Expression | None:
    """The condition under which PostgreSQL evaluates ``node``: the CASE branches and the
    FILTER around it, up to its aggregate (above it, conditions are of another level)."""
    conds: list[exp.Expression] = []

    def holds(c: exp.Expression) -> exp.Expression:
        return exp.Coalesce(this=exp.Paren(this=c.copy()), expressions=[exp.false()])

    below: Any = None
    child: Any = node
    parent: Any = node.parent
    while parent is not None:
        if isinstance(parent, exp.Case) and child is not parent.args.get("this"):
            ifs = parent.args.get("ifs") or []
            subject = parent.args.get("this")
            tests = [
                i.this if subject is None else exp.EQ(this=subject.copy(), expression=i.this) for i in ifs
            ]
            taken = next((n for n, i in enumerate(ifs) if child is i), None)
            conds.extend(exp.Not(this=holds(t)) for t in (tests[:taken] if taken is not None else tests))
            if taken is not None and below is ifs[taken].args.get("true"):
                conds.append(holds(tests[taken]))
        if isinstance(parent, exp.AggFunc):
            where = parent.parent.expression if isinstance(parent.parent, exp.Filter) else None
            if isinstance(where, exp.Where):
                conds.append(holds(where.this))
            break
        below, child, parent = child, parent, parent.parent
    return functools.reduce(lambda x, y: exp.And(this=x, expression=y), conds) if conds else None


def _jsonb_get(node: exp.JSONExtract | exp.JSONExtractScalar) -> exp.Expression:
    """``doc -> key`` and ``doc ->> key`` -> txjoin's UDF (txjoin.join.pgjson), which
    reads jsonb's printed text as PostgreSQL reads jsonb (Spark's GET_JSON_OBJECT
    reprints numbers and reads '$.a.b' as a path)."""
    from txjoin.join.pgjson import UDF_NAME

    key = json_key(node)
    text = exp.Literal.string(key) if isinstance(key, str) else exp.Null()
    index = exp.Literal.number(key) if isinstance(key, int) else exp.Null()
    as_text = exp.Boolean(this=isinstance(node, exp.JSONExtractScalar))
    return exp.Anonymous(this=UDF_NAME, expressions=[node.this.copy(), text, index, as_text])


def _find_json(tree: exp.Expression, a: Analysis) -> list[tuple[Any, list[str]]]:
    """json_build_object, jsonb_build_object and json_agg nodes, children
    first, with their values' PostgreSQL types (typed before other rewrites)."""
    found: list[tuple[Any, list[str]]] = []
    for node in tree.find_all(exp.Anonymous, exp.JSONArrayAgg, bfs=False):
        if isinstance(node, exp.Anonymous) and node.name.upper() not in _BUILDERS:
            continue
        values = node.expressions[1::2] if isinstance(node, exp.Anonymous) else [_agg_value(node)]
        found.append((node, [pg_type(v, a) or "unknown" for v in values]))
    return found[::-1]


_BUILDERS = ("JSON_BUILD_OBJECT", "JSONB_BUILD_OBJECT")


def _agg_value(node: Any) -> exp.Expression:
    inner: exp.Expression = node.this
    value: exp.Expression = inner.this if isinstance(inner, exp.Order) else inner
    return value


def _rewrite_json(found: list[tuple[Any, list[str]]]) -> None:
    """Objects -> their PostgreSQL text; json_agg's value -> its JSON text
    (the array around the elements is made with the aggregate, _agg_rewrite)."""
    for node, types in found:
        if isinstance(node, exp.Anonymous):
            keys = [k.this for k in node.expressions[0::2]]  # constants: the gate says so
            values = list(node.expressions[1::2])
            jsonb = node.name.upper() == "JSONB_BUILD_OBJECT"
            node.replace(jsontext.build_object(keys, values, types, jsonb=jsonb))
        else:
            value = _agg_value(node)
            value.replace(jsontext.value_text(value.copy(), types[0]))


def _typed_rewrites(tree: exp.Expression, a: Analysis) -> None:
    """Rewrite, in place, what Spark computes differently from PostgreSQL for
    the operand types at hand (docs/types.md). Unknown types: no rewrite."""
    actions: list[tuple[Any, str]] = []  # sqlglot's node classes do not all type as Expression
    # Decide on the untouched tree, then rewrite children before parents.
    for node in tree.find_all(exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Cast, exp.Round, exp.Sum, bfs=False):
        if not isinstance(node, exp.Expression):
            continue
        if isinstance(node, exp.Binary) and pg_type(node, a) in FLOAT_TYPES:
            actions.append((node, f"FLOAT:{pg_type(node, a)}"))  # PostgreSQL raises on overflow, underflow
        elif isinstance(node, exp.Div):
            t = pg_type(node, a)
            if t in INT_TYPES:
                actions.append((node, SPARK_INT[t]))  # PostgreSQL truncates; Spark's / is fractional
        elif isinstance(node, exp.Cast):
            target = cast_type(node.to)
            src = pg_type(node.this, a)
            if target in INT_TYPES and src is not None and base_type(src) == "numeric":
                actions.append((node, "ROUND"))  # numeric -> int rounds half away from zero
            elif target in INT_TYPES and src in FLOAT_TYPES:
                actions.append((node, "BROUND"))  # float -> int uses rint(): half to even
            elif target == "numeric":
                actions.append((node, "DECIMAL"))  # Spark's bare DECIMAL is DECIMAL(10,0)
            elif target in ("text", "varchar") and src is not None and base_type(src) == "bpchar":
                actions.append((node, "RTRIM"))  # char(n) -> text drops the padding
        elif isinstance(node, exp.Round):
            if node.args.get("decimals") is None and pg_type(node.this, a) in (*FLOAT_TYPES, *INT_TYPES):
                actions.append((node, "BROUND"))  # round(float8), round(int) are rint(): half to even
        elif isinstance(node, exp.Sum):
            arg = node.this.expressions[0] if isinstance(node.this, exp.Distinct) else node.this
            if pg_type(arg, a) == "int8":
                actions.append((node, "SUM8"))  # numeric in PostgreSQL: no bigint overflow
    for node, action in reversed(actions):
        if action.startswith("FLOAT:"):
            node.replace(_checked_float(node, action[6:]))
        elif isinstance(node, exp.Div):
            div = exp.IntDiv(this=node.this, expression=node.expression)
            node.replace(exp.Cast(this=div, to=exp.DataType.build(action)))
        elif isinstance(node, exp.Cast) and action == "DECIMAL":
            node.set("to", exp.DataType.build(f"DECIMAL(38, {NUMERIC_SCALE})"))
        elif isinstance(node, exp.Cast) and action == "ROUND":
            node.set("this", exp.Round(this=node.this))
        elif isinstance(node, exp.Cast) and action == "RTRIM":
            node.set("this", exp.Anonymous(this="RTRIM", expressions=[node.this]))
        elif isinstance(node, exp.Cast):
            node.set("this", exp.Anonymous(this="BROUND", expressions=[node.this]))
        elif isinstance(node, exp.Round):
            node.replace(_rint(exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE"))))
        elif isinstance(node, exp.Sum):
            arg = node.this.expressions[0] if isinstance(node.this, exp.Distinct) else node.this
            arg.replace(exp.Cast(this=arg.copy(), to=exp.DataType.build("DECIMAL(38, 0)")))


def translate(
    select: exp.Select, a: Analysis, name: str, out_cols: list[tuple[str, exp.Expression]]
) -> tuple[str, list[str]]:
    """``select`` as Spark SQL over one view per alias, and the output columns
    holding aggregates without ORDER BY (compared as multisets)."""
    tree = select.copy()
    tree.set("order", None)
    quotients = _find_quotients(tree, a)
    json_nodes = _find_json(tree, a)
    _case_rewrites(tree, a)
    if not mutated("enum-alphabetical"):
        _enum_rewrites(tree, a)
    _typed_rewrites(tree, a)
    _rewrite_quotients(quotients)
    _rewrite_json(json_nodes)
    # Tables -> views, keeping the name the SQL uses as alias.
    order = list(a.aliases)
    for t in tree.find_all(exp.Table):
        alias = t.alias_or_name
        t.set("db", None)
        t.set("catalog", None)
        t.set("this", exp.to_identifier(f"txj__{name}__{order.index(alias)}"))
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    # Output columns get the names PostgreSQL would give them.
    new_exprs = []
    unordered_cols: list[str] = []
    for (col_name, _), e in zip(out_cols, tree.expressions, strict=True):
        body = e.this if isinstance(e, exp.Alias) else e
        flags: list[bool] = []
        body = body.transform(functools.partial(_agg_rewrite, unordered=flags, output=name))
        if flags:
            unordered_cols.append(col_name)
        new_exprs.append(exp.Alias(this=body, alias=exp.to_identifier(col_name, quoted=True)))
    tree.set("expressions", new_exprs)

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.JSONExtract | exp.JSONExtractScalar):
            return _jsonb_get(node)
        if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
            # The index as written, counting from 1 (the planner parses with model.PG).
            raw = node.expressions[0]
            index: exp.Expression = raw.copy() if isinstance(raw, exp.Literal) else exp.Paren(this=raw.copy())
            element = exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[node.this.copy(), index.copy()])
            in_range = exp.GTE(this=index.copy(), expression=exp.Literal.number(1))
            # Past either end PostgreSQL gives NULL; Spark counts an index below 1 from the end.
            return exp.Paren(this=exp.Case(ifs=[exp.If(this=in_range, true=element)]))
        if isinstance(node, exp.Extract) and isinstance(node.this, exp.Var):
            field, of = node.this.name.upper(), node.expression
            if field == "DOW":  # PostgreSQL: 0-6 from Sunday; Spark's DAYOFWEEK: 1-7 from Sunday
                return exp.Paren(
                    this=exp.Sub(
                        this=exp.Anonymous(this="DAYOFWEEK", expressions=[of.copy()]),
                        expression=exp.Literal.number(1),
                    )
                )
            if field == "ISODOW":
                weekday = exp.Anonymous(this="WEEKDAY", expressions=[of.copy()])  # 0-6 from Monday
                return exp.Paren(this=exp.Add(this=weekday, expression=exp.Literal.number(1)))
            if field == "DOY":
                return exp.Anonymous(this="DAYOFYEAR", expressions=[of.copy()])
        if isinstance(node, exp.TimestampTrunc) and not node.args.get("_txj"):
            node.set("_txj", True)
            return exp.Cast(this=node, to=exp.DataType.build("TIMESTAMP_NTZ"))
        if isinstance(node, exp.Collate):
            inner: exp.Expression = node.this  # only COLLATE "C" passes: Spark's own byte order
            return inner
        if isinstance(node, exp.EQ):
            for scalar, other in ((node.this, node.expression), (node.expression, node.this)):
                arr = any_array(other)
                if arr is not None:
                    return exp.Anonymous(this="array_contains", expressions=[arr.copy(), scalar.copy()])
        return node

    # transform() does not descend into what it replaced: repeat for nested calls.
    out: exp.Expression = tree
    for _ in range(32):
        before = out.sql(dialect="spark")
        out = out.transform(rewrite)
        if out.sql(dialect="spark") == before:
            break
    return out.sql(dialect="spark"), unordered_cols

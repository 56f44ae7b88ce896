"""Differential cases for every allowlist entry (txjoin.join.plan.allowlist).

Each case is an expression over the conformance table ``c`` (CONFORMANCE_DDL);
aggregate entries' cases are evaluated per ``GROUP BY g``. The conformance
test runs every case on PostgreSQL and through txjoin's Spark translation and
fails if an entry has no case here.
"""

from __future__ import annotations

CONFORMANCE_DDL = """
CREATE TYPE size AS ENUM ('small', 'medium', 'large');
ALTER TYPE size ADD VALUE 'tiny' BEFORE 'small';
CREATE DOMAIN cents AS bigint CHECK (VALUE > -1000000000000);
CREATE DOMAIN price AS cents;
CREATE TABLE c (
    id int PRIMARY KEY, g int,
    i2 smallint, i4 int, i4b int, i8 bigint,
    n numeric, n2 numeric(10,2), n4 numeric(12,4),
    f4 real, f8 double precision,
    b bool, b2 bool,
    t text, t2 text, vc varchar(20), ch char(5), ch2 char(5),
    d date, ts timestamp, tz timestamptz, tm time, tm2 time,
    u uuid, by bytea, j json, jb jsonb,
    ai int[], at text[], e size, dm price
)
"""

CASES: dict[str, list[str]] = {
    "type smallint, integer, bigint": ["i2", "i4", "i8"],
    "type numeric(p,s)": ["n2", "n4"],
    "type numeric": ["n"],
    "type real, double precision": ["f4", "f8"],
    "type boolean": ["b"],
    "type text, varchar(n)": ["t", "vc"],
    "type char(n)": ["ch"],
    "type date": ["d", "d >= '2024-01-31'", "d BETWEEN '2000-02-29' AND '2099-12-31'", "'2024-01-01' <> d",
                  "@where d IN ('2024-01-01', '1999-12-31')", "d IS DISTINCT FROM '1970-01-01'"],
    "type timestamp": ["ts", "ts < '2024-01-31'", "ts >= '2024-01-31 13:45'", "ts = '2024-01-31T13:45:07.5'",
                       "@where ts BETWEEN '2000-01-01' AND '2030-06-30 23:59:59.999999'"],
    "type timestamptz": ["tz"],
    "type time": ["tm", "tm = tm2", "tm < tm2", "tm >= tm2", "@agg max(tm)", "@agg min(tm2)",
                  "@agg count(DISTINCT tm)", "json_build_object('t', tm)", "@agg json_agg(tm ORDER BY tm, id)"],
    "type uuid": ["u"],
    "type bytea": ["by"],
    "type json, jsonb": ["j", "jb"],
    "type arrays of integer, text, boolean, uuid": ["ai", "at"],
    "type domains": ["dm", "dm / 100", "dm > i8", "@agg max(dm)", "@agg sum(dm)"],
    "type enum": ["e", "e = 'medium'", "e < 'large'", "e BETWEEN 'small' AND 'large'", "e::text", "@agg max(e)",
                  "@agg min(e)", "@agg json_agg(id ORDER BY e, id)"],
    "operator +": ["i4 + i4b", "i2 + i2", "i8 + i4", "n2 + n4", "n2 + i4", "f8 + f8", "f4 + i4", "n + n2"],
    "operator -": ["i4 - i4b", "-i4", "n2 - n4", "-n2", "f8 - f4", "i8 - 1"],
    "operator *": ["i4 * i4b", "i2 * i2", "n2 * n4", "n2 * 3", "f8 * f8", "n * 2"],
    "operator /": ["i4 / nullif(i4b, 0)", "i8 / 3", "-7 / 2", "f8 / nullif(f8, 0)", "i2 / nullif(i2, 0)",
                   "round(n2 / nullif(n4, 0), 6)", "(i4 / nullif(n2, 0))::numeric(38,10)", "round(n2 / 3, 4)",
                   "round(i8 / 7.0, 10)", "round(n4 / 1.19, 0)", "(n2 * 100 / nullif(i4b, 0))::numeric(30,12)",
                   # Guarded: Spark runs txjoin's division on every row unless the guard reaches it.
                   "CASE WHEN n4 <> 0 THEN round(n2 / n4, 2) END",
                   "CASE WHEN n4 = 0 THEN NULL ELSE round(n2 / n4, 2) END",
                   "CASE n4 WHEN 0 THEN 0 ELSE round(n2 / n4, 2) END",
                   "@agg sum(round(n2 / i4, 2)) FILTER (WHERE i4 <> 0)"],
    "aggregate avg": ["@agg round(avg(i4), 4)", "@agg round(avg(n2), 10)", "@agg avg(i8)::numeric(38,6)",
                      "@agg round(avg(DISTINCT i2), 2)", "@agg round(avg(n4), 20)"],
    "operator %": ["i4 % nullif(i4b, 0)", "i8 % 7", "-7 % 3"],
    "operator =, <>": ["i4 = i4b", "i4 <> i8", "n2 = n4", "t = t2", "b = b2", "d = d", "u = u", "ch = ch2", "by = by", "t = 'a'"],
    "operator <, <=, >, >=": ["i4 < i4b", "n2 <= n4", "f8 > f4", "d >= d", "ts < ts", "tz > tz", "b < b2", "u < u",
                   "t COLLATE \"C\" < t2 COLLATE \"C\""],
    "operator AND, OR, NOT": ["b AND b2", "b OR b2", "NOT b", "(i4 > 0) AND (b OR i4b < 0)"],
    "operator IS [NOT] DISTINCT FROM": ["i4 IS DISTINCT FROM i4b", "t IS NOT DISTINCT FROM t2"],
    "operator IS [NOT] NULL": ["i4 IS NULL", "t IS NOT NULL", "j IS NULL", "b IS TRUE", "b IS NOT FALSE"],
    "operator IN (list)": ["i4 IN (1, 2, i4b)", "t IN ('a', 'B', t2)", "i4 NOT IN (0, 1)"],
    "operator BETWEEN": ["i4 BETWEEN i4b AND 100", "n2 BETWEEN 0 AND n4", "d BETWEEN d AND d"],
    "operator LIKE": ["t LIKE 'a%'", "t LIKE '%\\_%'", "vc LIKE '_b%'", "t NOT LIKE '%é%'"],
    "operator ||": ["t || t2", "t || '-' || vc", "i4 || 'x'", "n2 || ' EUR'", "'#' || i8 || '-' || u",
                    "e || t", "tm || ''", "n4 || t2", "b || '?'",
                    "(n2 * n2) || ''", "-n2 || ''",
                    "t || '${x}${env:HOME}${spark.sql.session.timeZone}'"],  # text, not Spark's variables
    "operator array[i]": ["ai[1]", "ai[3]", "ai[5]", "ai[0]", "at[2]", "ai[i2]", "at[-1]",
                          # Indexes sqlglot can type: it shifted them to count from 0.
                          "ai[length(t)]", "at[i2::int]", "ai[CASE WHEN b THEN 1 ELSE 2 END]"],
    "operator ->": ["jb -> 'a'", "jb -> 'o'", "jb -> 0", "jb -> -1", "jb -> 'o' -> 'x y'", "jb -> 'k'", "jb -> 'z'"],
    "operator ->>": ["jb ->> 'a'", "jb ->> 'k'", "jb ->> 'n'", "jb ->> 1", "jb ->> -2", "jb -> 'o' ->> 'x y'",
                     "@where jb ->> 'k' = 'v'", "jb ->> 'z' IS NULL", "(jb ->> 'k') COLLATE \"C\" < 'w'",
                     "json_build_object('k', jb ->> 'k', 'o', (jb -> 'o'))", "coalesce((jb -> 'a'), jb)"],
    "operator = ANY(array)": ["@where i4 = ANY(ai)", "@where t = ANY(at) AND b"],
    'operator COLLATE "C"': ['t COLLATE "C" >= t2 COLLATE "C"', '@agg max(t COLLATE "C")'],
    "operator CASE": ["CASE WHEN b THEN i4 ELSE i8 END", "CASE WHEN i4 > 0 THEN n2 WHEN b THEN 1 END",
                      "CASE WHEN t = 'a' THEN t2 ELSE 'x' END"],
    "function coalesce": ["coalesce(i4, i4b, 0)", "coalesce(n2, n4)", "coalesce(t, t2, 'z')",
                          # Spark widens DECIMAL(12,4) and (38,2) to 38 digits by dropping fraction digits.
                          "coalesce(n4, round(n2 / 3, 2))", "@where n4 = round(n4 / 1, 2)",
                          "greatest(n, i4::numeric(38,0))"],
    "function nullif": ["nullif(i4, i4b)", "nullif(t, 'a')"],
    "function greatest, least": ["greatest(i4, i4b)", "least(n2, n4, 0)", "greatest(d, d)", "least(f8, f4)"],
    "function abs": ["abs(i4)", "abs(n2)", "abs(f8)"],
    "function round": ["round(n4)", "round(n4, 2)", "round(n2, 1)", "round(f8)", "round(i4)", "round(n, 3)"],
    "function length, char_length": ["length(t)", "char_length(vc)"],
    "function substring, substr": ["substring(t from 2 for 3)", "substring(t, 1, 0)", "substring(vc from 3)",
                                   "substr(t2, 1, 2)", "substring(t || t2, 2, 100)"],
    "function left, right": ["left(t, 2)", "left(t2, 0)", "right(t, 1)", "right(vc, 30)"],
    "function lower, upper": ["lower(t)", "upper(t2)"],
    "function extract": ["extract(year from d)", "extract(dow from ts)", "extract(isodow from d)",
                                    "extract(doy from d)", "extract(week from ts)", "extract(second from ts)",
                                    "extract(quarter from d)", "extract(hour from ts) * 2", "extract(day from ts)"],
    "function date_trunc": ["date_trunc('week', ts)", "date_trunc('month', ts)", "date_trunc('hour', ts)",
                            "date_trunc('quarter', ts)", "date_trunc('year', ts)", "date_trunc('second', ts)"],
    "cast integer -> integer": ["i4::bigint", "i2::int", "i8::smallint"],
    "cast numeric -> integer": ["n2::int", "n4::bigint", "n::smallint"],
    "cast double precision -> integer": ["f8::int", "f4::bigint"],
    "cast integer or numeric -> numeric": ["i4::numeric", "n4::numeric(10,2)", "i8::numeric(20,1)", "n::numeric(30,5)"],
    "cast integer or numeric -> double precision": ["i8::float8", "n2::float8", "n::double precision"],
    "cast integer -> text": ["i4::text", "i8::text"],
    "cast text, varchar, enum, uuid, time -> text": ["vc::text", "u::text", "t::varchar", "tm::text",
                                                     "ch::text", "length(ch::varchar)"],  # drops char(n)'s padding
    "cast numeric(p,s) -> text": ["n2::text", "n4::text", "(-n2)::text"],
    "cast boolean -> text": ["b::text"],
    "cast timestamp -> date": ["ts::date"],
    "cast date -> timestamp": ["d::timestamp"],
    "aggregate count": ["@agg count(*)", "@agg count(i4)", "@agg count(DISTINCT t)"],
    "aggregate sum": ["@agg sum(i4)", "@agg sum(i8)", "@agg sum(n2)", "@agg sum(DISTINCT i2)", "@agg sum(n)"],
    "aggregate min, max": ["@agg min(i4)", "@agg max(n2)", "@agg max(d)", "@agg min(tz)", "@agg min(f8)"],
    "aggregate FILTER (WHERE ...)": ["@agg count(*) FILTER (WHERE i4 > 0)", "@agg sum(i4) FILTER (WHERE b)",
                                     "@agg json_agg(i4 ORDER BY id) FILTER (WHERE b)",
                                     "@agg string_agg(t, ',' ORDER BY id) FILTER (WHERE t <> '')",
                                     # Typed as their aggregate: integer division, numeric quotient rules.
                                     "@agg sum(i4) FILTER (WHERE b) / 2", "@agg round(sum(n2) FILTER (WHERE b) / 3, 4)"],
    "aggregate bool_and, bool_or": ["@agg bool_and(b)", "@agg bool_or(b2)"],
    "aggregate json_agg": ["@agg json_agg(i4 ORDER BY id)", "@agg json_agg(t ORDER BY id DESC)",
                           "@agg json_agg(n2 ORDER BY i4, id)", "@agg json_agg(j ORDER BY id)",
                           "@agg json_agg(jb ORDER BY id)", "@agg json_agg(ts ORDER BY id)",
                           "@agg json_agg(jsonb_build_object('d', d, 'b', b) ORDER BY id)",
                           "@agg json_agg(json_build_object('t', t, 'i', i4) ORDER BY id)"],
    "aggregate array_agg": ["@agg array_agg(i4 ORDER BY id)", "@agg array_agg(t ORDER BY id)"],
    "aggregate string_agg": ["@agg string_agg(t, ',' ORDER BY id)", "@agg string_agg(vc, '' ORDER BY id DESC)"],
    "function json_build_object": ["json_build_object('i', i4, 't', t, 'n', n2, 'b', b)",
                                   "json_build_object('d', d, 'ts', ts, 'j', j, 'jb', jb, 'i8', i8, 'vc', vc)",
                                   "json_build_object()", "json_build_object('é\"\\\\k', 'v', 'n', NULL, 'o', json_build_object('x', n4))",
                                   "json_build_object('${spark.sql.session.timeZone}', t)"],
    "function jsonb_build_object": ["jsonb_build_object('k', t2)",
                                    "jsonb_build_object('bb', i4, 'a', t, 'a', n2, 'ccc', jb, 'd', d, 'ts', ts, 'b', b)",
                                    "jsonb_build_object('o', jsonb_build_object('z', 1, 'y', vc))"],
}  # fmt: skip

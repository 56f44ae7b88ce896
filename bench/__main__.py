"""`make bench`: every benchmark, each beside its baseline, into bench/RESULTS.md.

Runs bench.capture, bench.assemble, bench.apply, bench.join, bench.size,
bench.e2e, bench.sink, bench.fixed_cost and bench.consistency one after the other (each in its own
process, so one's Spark session or PostgreSQL cannot slow the next), then
writes bench/RESULTS.md (a summary table, per-stage tables, the commands)
and one PNG plot per figure under bench/plots/.

    .venv/bin/python -m bench                 # the full suite (about 90 minutes on 2 cores)
    .venv/bin/python -m bench --quick         # smaller sizes, for a smoke run
    .venv/bin/python -m bench --only join,e2e # some stages; the others keep their last figures
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import fixed_cost

HERE = Path(__file__).parent
FIGURES = HERE / "figures.json"  # the last figures of every stage, so --only can re-render all
PLOTS = HERE / "plots"


def commands(quick: bool) -> dict[str, list[str]]:
    if quick:
        return {
            "capture": ["bench.capture", "--events", "60000", "--runs", "3"],
            "assemble": ["bench.assemble", "--events", "60000", "--runs", "3"],
            "apply": ["bench.apply", "--rows", "200000", "--batch", "50000", "--batches", "3"],
            "join": ["bench.join", "--sizes", "10000,100000", "--patterns", "recent", "--batches", "6"],
            "size": [
                "bench.size", "--sizes", "200000", "--runs", "1", "--big", "40000", "--big-at", "200000",
            ],
            "e2e": ["bench.e2e", "--runs", "3", "--seconds", "10"],
            "sink": ["bench.sink", "--sizes", "4000000,8000000", "--runs", "1"],
            "fixed_cost": ["bench.fixed_cost", "--txs", "10"],
            "consistency": ["bench.consistency", "--txs", "60"],
        }
    return {
        "capture": ["bench.capture", "--events", "300000", "--runs", "3"],
        "assemble": ["bench.assemble", "--events", "400000", "--runs", "3", "--million"],
        "apply": ["bench.apply", "--rows", "1000000", "--batch", "100000", "--batches", "5"],
        "join": [
            "bench.join", "--sizes", "10000,100000,1000000", "--patterns", "recent,uniform", "--batches", "8",
        ],
        "size": [
            "bench.size", "--sizes", "1000000,10000000", "--runs", "3",
            "--big", "2000000", "--big-at", "10000000",
        ],
        "e2e": ["bench.e2e", "--runs", "3", "--seconds", "30"],
        "sink": ["bench.sink", "--sizes", "4000000,16000000", "--keys", "5000", "--runs", "3"],
        "fixed_cost": ["bench.fixed_cost", "--txs", "30"],
        "consistency": ["bench.consistency", "--txs", "200"],
    }


def run_stage(name: str, argv: list[str], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", *argv, "--json", str(out)]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    started = time.monotonic()
    # The stage's own output is the progress display.
    subprocess.run(cmd, check=True, cwd=HERE.parent)
    figures: dict[str, Any] = json.loads(out.read_text())
    figures["_command"] = ".venv/bin/python -m " + " ".join(argv)
    figures["_seconds"] = time.monotonic() - started
    return figures


# -- rendering ------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def rng(xs: list[float], fmt: str = ",.0f") -> str:
    return f"{med(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def ratio(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=False) if y]


def summary_rows(f: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(figure, txjoin, baseline, ratio, target, met) rows."""
    rows = []
    if "capture" in f:
        c = f["capture"]
        r = c["ratio"]
        rows.append((
            "capture, row events/s", rng(c["capture_per_s"]), "raw replication read: " + rng(c["raw_per_s"]),
            rng(r, ".2f"), ">= 0.25 of raw", "yes" if med(r) >= 0.25 else "no",
        ))  # fmt: skip
    if "assemble" in f:
        for label, a in f["assemble"].items():
            if label.startswith("_") or label == "million":
                continue
            r = a["ratio"]
            rows.append((
                f"decode + assembly, {label}, events/s", rng(a["assemble_per_s"]),
                "read + decode only: " + rng(a["read_per_s"]), rng(r, ".2f"), ">= 0.8 of read + decode",
                "yes" if med(r) >= 0.8 else "no",
            ))  # fmt: skip
    if "apply" in f:
        a = f["apply"]
        r = ratio(a["txjoin_per_s"], a["rowwise_per_s"])
        rows.append((
            f"apply stage alone ({a['rows']:,} orders, {a['batch']:,} row changes per batch), changes/s",
            rng(a["txjoin_per_s"]), "per-row path it replaced: " + rng(a["rowwise_per_s"]), rng(r, ".1f"),
            ">= 100,000/s", "yes" if med(a["txjoin_per_s"]) >= 100_000 else "no",
        ))  # fmt: skip
    if "sink" in f:
        s = f["sink"]
        small, large = s["sizes"][0], s["sizes"][-1]
        rows.append((
            f"one batch of {s['keys']:,} scattered keys (a key-range rewrite), {small['rows']:,} -> "
            f"{large['rows']:,} rows: peak MiB above the process",
            f"{rng(small['batch_peak_over_mib'])} -> {rng(large['batch_peak_over_mib'])}",
            f"reading the whole table: {rng(small['whole_read_peak_over_mib'])} -> "
            f"{rng(large['whole_read_peak_over_mib'])} ({s['baseline_peak_growth']:.2f}x)",
            f"{s['peak_growth']:.2f}x", "<= 1.5x growth", "yes" if s["peak_growth"] <= 1.5 else "no",
        ))  # fmt: skip
        if "pair_peak_growth" in s:
            g = s["pair_peak_growth"]
            rows.append((
                f"the same batch with a two-column key (order_id, region), {small['rows']:,} -> "
                f"{large['rows']:,} rows: peak MiB above the process",
                f"{rng(small['pair_peak_over_mib'])} -> {rng(large['pair_peak_over_mib'])}",
                "reading the whole table, as above", f"{g:.2f}x", "<= 1.5x growth",
                "yes" if g <= 1.5 else "no",
            ))  # fmt: skip
    if "size" in f:
        for z in f["size"]["sizes"]:
            r = [t / med(z["ctas_s"]) for t in z["first_version_s"]]
            rows.append((
                f"first version of orders JOIN clients, {z['rows']:,} orders, s",
                rng(z["first_version_s"], ",.1f"),
                f"PostgreSQL CREATE TABLE AS: {rng(z['ctas_s'], '.1f')}; Spark batch rebuild: "
                f"{rng(z['spark_s'], '.1f')}", f"{rng(r, '.1f')}x CTAS", "<= 10x CTAS at 10M",
                ("yes" if med(r) <= 10 else "no") if z["rows"] >= 10_000_000 else "",
            ))  # fmt: skip
            peak = max(z["peak_rss_gib"])
            rows.append((
                f"peak memory (PSS) of all txjoin processes, {z['rows']:,} orders, first version",
                f"{rng(z['peak_rss_gib'], '.2f')} GiB", "", "", "<= 6 GiB", "yes" if peak <= 6 else "no",
            ))  # fmt: skip
            b = z.get("big")
            if b:
                ok = b["torn_versions"] == 0 and b["moves"] == 1 and b["big_peak_rss_gib"] <= 6
                rows.append((
                    f"one transaction updating {b['big']:,} rows on {z['rows']:,} orders",
                    f"visible after {b['big_visible_s']:.0f} s, peak {b['big_peak_rss_gib']:.2f} GiB; "
                    f"{b['torn_versions']} torn of {b['versions']} versions",
                    f"sum(amount) {b['sum_before']} -> {b['sum_after']} in {b['moves']} step(s)", "",
                    "none or all at every version; <= 6 GiB", "yes" if ok else "no",
                ))  # fmt: skip
    if "join" in f:
        for pattern, sizes in f["join"].items():
            if pattern.startswith("_") or len(sizes) < 2:
                continue
            first, last = sizes[0], sizes[-1]
            growth = med(last["batch_s"]) / med(first["batch_s"])
            rows.append((
                f"incremental join per batch ({pattern} changes), {last['rows']:,} vs {first['rows']:,} rows",
                f"{med(last['batch_s']):.3f} s vs {med(first['batch_s']):.3f} s", "itself at the small size",
                f"{growth:.2f}x", "<= 1.5x", "yes" if growth <= 1.5 else "no",
            ))  # fmt: skip
            speed = med(last["full_s"]) / med(last["batch_s"])
            rows.append((
                f"full recompute / incremental ({pattern}), {last['rows']:,} rows",
                f"{med(last['batch_s']):.3f} s",
                f"full recompute (Spark on Parquet): {med(last['full_s']):.2f} s",
                f"{speed:.1f}x", ">= 10x", "yes" if speed >= 10 else "no",
            ))  # fmt: skip
    if "e2e" in f:
        e = f["e2e"]
        t = e["throughput"]["row_events_per_s"]
        capture = med(f["capture"]["capture_per_s"]) if "capture" in f else None
        rows.append((
            "end to end (capture to Delta), row events/s", rng(t),
            "capture alone: " + (f"{capture:,.0f}" if capture else "n/a"),
            f"{med(t) / capture:.2f}" if capture else "n/a", ">= 0.4 of capture alone",
            ("yes" if med(t) >= 0.4 * capture else "no") if capture else "",
        ))  # fmt: skip
        if "drain_row_events_per_s" in e["throughput"]:
            d = e["throughput"]["drain_row_events_per_s"]
            rows.append((
                "drain of a backlog (capture and pipeline stopped while the clients ran), row events/s",
                rng(d), "capture alone: " + (f"{capture:,.0f}" if capture else "n/a"),
                f"{med(d) / capture:.2f}" if capture else "n/a", ">= 0.4 of capture alone (measured alike)",
                ("yes" if med(d) >= 0.4 * capture else "no") if capture else "",
            ))  # fmt: skip
        for share, lat in e["latency"].items():
            at_half = abs(float(share) - 0.5) < 1e-9  # the issue's target is at 50% of the maximum
            ok = med(lat["p50_s"]) <= 1 and med(lat["p99_s"]) <= 2
            rows.append((
                f"commit-to-visible at {float(share):.0%} of max ({lat['rate']:,.1f} tx/s)",
                f"p50 {rng(lat['p50_s'], '.2f')} s, p99 {rng(lat['p99_s'], '.2f')} s", "", "",
                "p50 <= 1 s, p99 <= 2 s" if at_half else "", ("yes" if ok else "no") if at_half else "",
            ))  # fmt: skip
        k = e["keep_up"]
        rows.append((
            "keeping up with PostgreSQL's max commit rate (ledger transfers)",
            f"{k['reached_tx_per_s']:,.0f} tx/s reached, lag growth {k['lag_growth_s_per_min']:+.2f} s/min",
            f"PostgreSQL alone: {rng(k['postgres_max_tx_per_s'])} tx/s",
            f"{k['reached_tx_per_s'] / med(k['postgres_max_tx_per_s']):.2f}", "reaches the max, bounded lag",
            "yes" if k["lag_growth_s_per_min"] < 1.0 and k["reached_tx_per_s"] >= 0.95 * k["offered_tx_per_s"]
            else "no",
        ))  # fmt: skip
    if "fixed_cost" in f:
        fc = f["fixed_cost"]
        rows.append((
            "fixed cost: one one-row transaction, commit to visible (one micro-batch each)",
            f"median {fc['median']['visible']:.2f} s, p90 {fc['p90_visible']:.2f} s",
            "", "", "", "",
        ))  # fmt: skip
        if "floor" in fc:
            rows.append((
                "fixed cost in Spark: trigger start to Delta commit, one one-row transaction",
                f"median {fc['median']['in_spark']:.3f} s",
                f"Spark's floor, same shape without txjoin's code: {fc['floor']['in_spark']:.3f} s",
                f"{fc['median']['in_spark'] / fc['floor']['in_spark']:.2f}x", "", "",
            ))  # fmt: skip
    demo = f.get("consistency", {}).get("pizzeria", {})
    if demo.get("p50_s") is not None:
        rows.append((
            "commit-to-visible, pizzeria scenario (what `make demo` runs; checks and naive baseline on)",
            f"p50 {demo['p50_s']:.2f} s" + (f", p99 {demo['p99_s']:.2f} s" if demo.get("p99_s") else ""),
            "", "", "p50 <= 1 s", "yes" if demo["p50_s"] <= 1 else "no",
        ))  # fmt: skip
    for name, c in f.get("consistency", {}).items():
        if name.startswith("_"):
            continue
        rows.append((
            f"consistency, scenario {name}: Delta versions equal to the SQL at their cut",
            f"{c['violations']} violations in {c['versions_checked']} versions",
            f"naive per-event join: {c['naive_torn']} torn of {c['naive_versions']} versions"
            + (f", {n} breaking the invariant" if (n := c["naive_invariant_violations"]) else ""),
            "", "0 violations", "yes" if c["violations"] == 0 else "no",
        ))  # fmt: skip
    return rows


def plots(f: dict[str, Any]) -> list[str]:
    """One PNG per figure; returns their names (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no plots (make bench installs it)", file=sys.stderr)
        return []
    PLOTS.mkdir(exist_ok=True)
    made = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(PLOTS / f"{name}.png", dpi=100)
        plt.close(fig)
        made.append(f"{name}.png")

    def bars(name: str, title: str, labels: list[str], series: list[list[float]], ylabel: str) -> None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        meds = [med(s) for s in series]
        err = [[m - min(s) for m, s in zip(meds, series, strict=True)],
               [max(s) - m for m, s in zip(meds, series, strict=True)]]  # fmt: skip
        ax.bar(labels, meds, yerr=err, capsize=4, color=["#999999", "#1f77b4"] * len(labels))
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        save(fig, name)

    if "capture" in f:
        c = f["capture"]
        bars("capture", "Capture vs raw replication read", ["raw read (limit)", "txjoin capture"],
             [c["raw_per_s"], c["capture_per_s"]], "row events/s")  # fmt: skip
    if "assemble" in f:
        labels, series = [], []
        for label, a in f["assemble"].items():
            if label.startswith("_") or label == "million":
                continue
            labels += [f"read only\n{label}", f"assembly\n{label}"]
            series += [a["read_per_s"], a["assemble_per_s"]]
        bars("assemble", "Decode + assembly vs read + decode", labels, series, "events/s")
    if "join" in f:
        for pattern, sizes in f["join"].items():
            if pattern.startswith("_"):
                continue
            fig, ax = plt.subplots(figsize=(6, 3.5))
            xs = [s["rows"] for s in sizes]
            ax.plot(xs, [med(s["batch_s"]) for s in sizes], "o-", label="txjoin incremental, per batch")
            ax.plot(xs, [med(s["full_s"]) for s in sizes], "s--", color="#999999",
                    label="full recompute (Spark on Parquet)")  # fmt: skip
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("rows in the joined table")
            ax.set_ylabel("seconds")
            ax.set_title(f"Per-batch cost vs table size ({pattern} changes)")
            ax.legend()
            save(fig, f"join-{pattern}")
    if "e2e" in f:
        e = f["e2e"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        shares = sorted(e["latency"], key=float)
        xs = [float(s) * 100 for s in shares]
        ax.plot(xs, [med(e["latency"][s]["p50_s"]) for s in shares], "o-", label="p50")
        ax.plot(xs, [med(e["latency"][s]["p99_s"]) for s in shares], "s-", label="p99")
        ax.axhline(1, color="#999999", linestyle=":", label="p50 target at 50%")
        ax.axhline(2, color="#cccccc", linestyle="--", label="p99 target at 50%")
        ax.set_xlabel("load, % of the maximum throughput")
        ax.set_ylabel("commit-to-visible, s")
        ax.set_title("Commit-to-visible latency under load")
        ax.legend()
        save(fig, "latency")
        series = e["keep_up"].get("series") or []
        if series:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot([t for t, _ in series], [lat for _, lat in series], ".", markersize=2)
            ax.set_xlabel("seconds since the first commit")
            ax.set_ylabel("commit-to-visible, s")
            ax.set_title("Lag at PostgreSQL's max commit rate (ledger)")
            save(fig, "keep-up")
    cons = {k: v for k, v in f.get("consistency", {}).items() if not k.startswith("_")}
    if cons:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = list(cons)
        pos = list(range(len(names)))
        ax.bar([x - 0.2 for x in pos], [cons[n]["naive_torn"] for n in names], 0.4, color="#999999",
               label="naive per-event join: torn versions")  # fmt: skip
        ax.bar([x + 0.2 for x in pos], [cons[n]["violations"] for n in names], 0.4, color="#1f77b4",
               label="txjoin: versions not equal to the SQL")  # fmt: skip
        ax.set_xticks(pos, names)
        ax.set_ylabel("Delta versions")
        ax.set_title("Torn versions, same change streams")
        ax.legend()
        save(fig, "consistency")
    return made


def details(f: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if "fixed_cost" in f:
        m = f["fixed_cost"]["median"]
        out.append(
            f"- Fixed cost of a micro-batch ({f['fixed_cost']['txs']} one-row transactions, one per batch): "
            f"commit to visible median {m['visible']:.2f} s, p90 {f['fixed_cost']['p90_visible']:.2f} s. "
            "Median seconds per stage: "
            + ", ".join(
                f"{k} {m[k]:.3f}"
                for k in fixed_cost.STAGES
                if k in m
            )
            + " (capture: commit to its changelog segment; trigger: that segment to the trigger's start; "
            "other: the rest of the batch up to the Delta commit; offsets: after it)."
        )
        if "floor" in f["fixed_cost"]:
            fl = f["fixed_cost"]["floor"]
            split = ", ".join(f"{k} {fl[k]:.3f}" for k in fixed_cost.FLOOR_STAGES)
            out.append(
                "- Spark's floor for the same micro-batch without txjoin's code (rate source, one row, an "
                "identity applyInPandasWithState, collect, a join of two one-row Arrow views), median "
                f"seconds: trigger start to the join's end {fl['in_spark']:.3f} ({split})."
            )
    if "assemble" in f and "million" in f["assemble"]:
        m = f["assemble"]["million"]
        out.append(
            f"- One transaction of 1,000,000 rows through assembly: {m['seconds']:.1f} s, Python workers' "
            f"peak RSS {m['worker_peak_mib']:,.0f} MiB."
        )
    if "assemble" in f:
        for label, a in f["assemble"].items():
            if not label.startswith("_") and label != "million":
                out.append(
                    f"- Assembly per-batch latency, {label}: p50 {a['batch_p50_s']:.2f} s, "
                    f"p99 {a['batch_p99_s']:.2f} s."
                )
    if "join" in f:
        for pattern, sizes in f["join"].items():
            if pattern.startswith("_"):
                continue
            out.append(f"- Join, {pattern} changes (200 transactions per batch):")
            for s in sizes:
                stages = ", ".join(f"{k} {v:.3f}" for k, v in sorted(s["stages_s"].items()))
                out.append(
                    f"  - {s['rows']:,} rows: incremental {rng(s['batch_s'], '.3f')} s per batch "
                    f"({stages}); full recompute {rng(s['full_s'], '.2f')} s; rebuild from the replicas "
                    f"{med(s['rebuild_s']):.2f} s"
                )
    if "size" in f:
        for z in f["size"]["sizes"]:
            snap = [x for x in z["snapshot_s"] if x is not None]
            out.append(
                f"- Size {z['rows']:,} orders ({z['rows'] // 20:,} clients): txjoin's first version "
                f"{rng(z['first_version_s'], ',.1f')} s, of which the snapshot took "
                f"{rng(snap, '.1f') if snap else '?'} s and the replica load {rng(z['load_s'], '.1f')} s; "
                f"PostgreSQL CREATE TABLE AS {rng(z['ctas_s'], '.1f')} s; Spark batch rebuild from Parquet "
                f"{rng(z['spark_s'], '.1f')} s ({rng(z['spark_job_s'], '.1f')} s "
                f"without starting Spark; the COPY export to Parquet took {z['export_s']:.0f} s more); "
                f"txjoin exited with {sorted(set(z['exit_codes']))} on SIGTERM."
            )  # fmt: skip
    if "e2e" in f:
        e = f["e2e"]
        t = e["throughput"]
        out.append(
            f"- End to end: clients unpaced committed {rng(t['committed_tx_per_s'], ',.1f')} transactions/s "
            f"(20 inserts each; one in ten renames a client instead); txjoin delivered "
            f"{t['max_tx_per_s']:,.1f} tx/s to Delta; commit-to-visible p50 at that load "
            f"{rng(t['p50_s'], '.2f')} s. "
            + (
                f"The warm-up run before them, the first after Spark's start, delivered "
                f"{t['cold_row_events_per_s']:,.0f} row events/s. "
                if "cold_row_events_per_s" in t
                else ""
            )
            + "Median batch stages (s) per run: "
            + "; ".join(", ".join(f"{k} {v:.2f}" for k, v in s.items()) for s in t["batch_stages_s"])
            + "."
        )
        if "drain_row_events_per_s" in t:
            out.append(
                f"- Drain: the clients committed for a third of each run's seconds with capture and the "
                f"pipeline stopped; both then started and drained the backlog at "
                f"{rng(t['drain_row_events_per_s'])} row events/s, from their start until every output "
                f"covered the last commit."
            )
        k = e["keep_up"]
        out.append(
            f"- Keeping up: PostgreSQL alone reached {rng(k['postgres_max_tx_per_s'])} ledger tx/s; with "
            f"txjoin running, clients paced at {k['offered_tx_per_s']:,.0f} tx/s reached "
            f"{k['reached_tx_per_s']:,.0f} tx/s; lag p50 {k['p50_s']:.2f} s, p99 {k['p99_s']:.2f} s, "
            f"growth {k['lag_growth_s_per_min']:+.2f} s per minute."
        )
    return out


def render(f: dict[str, Any], made: list[str]) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`.venv/bin/python -m bench`); do not edit by hand. Every figure is",
        "the median of at least 3 runs with (min-max), beside a baseline measured in the same run",
        "(the consistency rows are counts from one run per scenario).",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; "
        f"written {now}.",
        "",
        "| figure | txjoin | baseline (same run) | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for row in summary_rows(f):
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Details", "", *details(f), "", "## Commands", ""]
    for stage in ("capture", "assemble", "apply", "join", "size", "e2e", "sink", "fixed_cost", "consistency"):
        if stage in f:
            lines.append(f"- {stage}: `{f[stage]['_command']}` ({f[stage]['_seconds'] / 60:.1f} min)")
    if made:
        lines += ["", "## Plots", ""]
        lines += [f"![{m}](plots/{m})" for m in made]
    notes = HERE / "NOTES.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="smaller sizes (a smoke run; figures are not comparable)"
    )
    ap.add_argument(
        "--only",
        help="comma-separated stages: capture, assemble, apply, join, size, e2e, sink, fixed_cost, "
        "consistency",
    )
    ap.add_argument("--render", action="store_true", help="only rewrite RESULTS.md from bench/figures.json")
    args = ap.parse_args()
    figures: dict[str, Any] = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    if not args.render:
        cmds = commands(args.quick)
        stages = args.only.split(",") if args.only else list(cmds)
        unknown = set(stages) - set(cmds)
        if unknown:
            sys.exit(f"unknown stage(s) {sorted(unknown)}: choose from {sorted(cmds)}")
        for stage in stages:
            out = HERE / f".{stage}.json"
            figures[stage] = run_stage(stage, cmds[stage], out)
            out.unlink()
            FIGURES.write_text(json.dumps(figures, indent=2))  # kept as each stage finishes
    made = plots(figures)
    (HERE / "RESULTS.md").write_text(render(figures, made))
    print(f"\nwrote {HERE / 'RESULTS.md'}" + (f" and {len(made)} plots in {PLOTS}" if made else ""))


if __name__ == "__main__":
    main()

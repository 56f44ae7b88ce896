"""``txjoin scenario run NAME --plot FILE.png``: the tearing, seen rather than read.

One panel per side (the naive baseline, then txjoin), one point per Delta
version at the time it was committed: the scenario's metric (the ledger's
total) when it has one, otherwise 1 for a version equal to the SQL at a real
state of the sources and 0 for a torn one. Torn versions are marked with a
red cross. Needs matplotlib (``pip install 'txjoin[bench]'``).
"""

from __future__ import annotations

from pathlib import Path

from txjoin.errors import MissingDependency
from txjoin.scenario.run import Point, Report

__all__ = ["plot_report"]


def plot_report(report: Report, path: Path) -> Path:
    """Draw ``report``'s timeline into the PNG ``path``; return it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependency(
            "--plot needs matplotlib: pip install 'txjoin[bench]' (or pip install matplotlib)",
            package="matplotlib",
        ) from None
    points = report.timeline
    if not points:
        raise MissingDependency("the run checked no versions, so there is nothing to plot", package="")
    start = min(p.t_ms for p in points)
    metric = any(p.value is not None for p in points)
    sides = [s for s in ("naive", "txjoin") if any(p.side == s for p in points)]
    fig, axes = plt.subplots(len(sides), 1, figsize=(10, 3.2 * len(sides)), sharex=True, squeeze=False)
    for ax, side in zip(axes[:, 0], sides, strict=True):
        mine = [p for p in points if p.side == side and (not metric or p.value is not None)]
        for output in sorted({p.output for p in mine}):
            series = sorted((p for p in mine if p.output == output), key=lambda p: p.t_ms)
            xs = [(p.t_ms - start) / 1000 for p in series]
            ax.step(xs, [_y(p, metric) for p in series], where="post", label=output, linewidth=1)
            bad = [p for p in series if not p.ok]
            ax.scatter(
                [(p.t_ms - start) / 1000 for p in bad],
                [_y(p, metric) for p in bad],
                marker="x",
                color="red",
                zorder=3,
                label=f"{output}: torn ({len(bad)} of {len(series)})",
            )
        title = "naive baseline (events applied as they arrive)" if side == "naive" else "txjoin"
        ax.set_title(f"{report.scenario}: {title}")
        ax.set_ylabel("metric per version" if metric else "1 = consistent, 0 = torn")
        if not metric:
            ax.set_ylim(-0.2, 1.2)
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the first version")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _y(p: Point, metric: bool) -> float:
    if metric:
        return float(p.value if p.value is not None else 0.0)
    return 1.0 if p.ok else 0.0

"""The roofline chart of a bench run: where each case sits under the device's ceilings.

Log-log axes: arithmetic intensity (FLOP/byte) across, achieved FLOP/s up. The memory
ceiling is the line ``bandwidth * intensity``; each compute ceiling (one per dtype the
cases compute in) is flat at that dtype's peak, drawn from the ridge point on. A case is
a point, coloured by op and labelled with its workload; a point near its ceiling is as
fast as the hardware allows, one far below it has headroom. Cases that did no arithmetic
(or failed) are left out. matplotlib is imported here only, with the Agg backend, so
neither a display nor matplotlib is needed to run a bench without ``--plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TileOpsError

__all__ = ["plot_roofline"]


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise TileOpsError("--plot needs matplotlib: pip install matplotlib (or tileops[dev])") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_roofline(doc: dict[str, Any], path: str | Path) -> Path:
    """Draw the roofline chart of a bench document (see :mod:`.report`) into a PNG at ``path``."""
    points = [r for r in doc["results"] if r["status"] == "ok" and r["flops"] and r["intensity"]
              and r["achieved_flops_per_s"]]
    if not points:
        raise TileOpsError("nothing to plot: no case both succeeded and does arithmetic")
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(11, 6), dpi=110)
    xs = [r["intensity"] for r in points]
    ys = [r["achieved_flops_per_s"] for r in points]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    profile = doc["profile"]
    y_top = max(ys)
    if profile is not None:
        bandwidth = profile["bandwidth"]
        dtypes = sorted({r["compute_dtype"] for r in points if r["compute_dtype"] in profile["compute"]})
        peaks = {d: profile["compute"][d] for d in dtypes}
        if peaks:
            x_hi = max(x_hi, 4 * max(peaks.values()) / bandwidth)
            y_top = max(y_top, max(peaks.values()))
        x_roof = max(peaks.values()) / bandwidth if peaks else x_hi
        ax.plot([x_lo, x_roof], [bandwidth * x_lo, bandwidth * x_roof], color="black", linewidth=1.5,
                label=f"memory {bandwidth / 1e9:.3g} GB/s ({profile['bandwidth_figure']})")
        styles = ["--", "-.", ":", (0, (5, 1))]
        for i, (dtype, peak) in enumerate(sorted(peaks.items())):
            ridge = peak / bandwidth
            ax.plot([ridge, x_hi], [peak, peak], color="dimgray", linestyle=styles[i % len(styles)], linewidth=1.2,
                    label=f"{dtype} {peak / 1e12:.3g} TFLOP/s {profile['compute_figures'][dtype]} "
                          f"(ridge {ridge:.3g} FLOP/B)")
    cmap = plt.get_cmap("tab20")
    ops = sorted({r["op"] for r in points})
    for i, op in enumerate(ops):
        mine = [r for r in points if r["op"] == op]
        ax.scatter([r["intensity"] for r in mine], [r["achieved_flops_per_s"] for r in mine], s=36,
                   color=cmap(i % cmap.N), edgecolor="black", linewidth=0.4, zorder=3, label=op)
        for r in mine:
            ax.annotate(f"{r['workload']}[{r['case']}]", (r["intensity"], r["achieved_flops_per_s"]), fontsize=6,
                        xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(ys) / 10, y_top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    dev = doc["device"]
    title = f"Roofline: {dev['name']} ({dev['type']})"
    if profile is not None:
        title += f", profile {profile['name']}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out

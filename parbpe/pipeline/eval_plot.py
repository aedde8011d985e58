"""parbpe eval --plot: bytes/token and Rényi efficiency of each tokenizer by method, side by side, as a
PNG (matplotlib, from the `plot` extra: imported only here)."""

from __future__ import annotations

import os


def plot_rows(rows: list[dict], path: str, alpha: float) -> None:
    """Two bar charts (bytes/token, Rényi efficiency), a group of bars per tokenizer, a bar per method."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'parbpe[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["tokenizer"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["tokenizer"], r["method"]): r for r in rows}
    width = 0.8 / len(methods)
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 2.2 * len(names) + 2), 4), constrained_layout=True)
    for ax, key, title in ((axes[0], "bytes_per_token", "bytes per token (higher: fewer tokens)"),
                           (axes[1], "renyi_efficiency", f"Rényi efficiency, α = {alpha:g}")):
        for m, method in enumerate(methods):
            xs = [k + (m - (len(methods) - 1) / 2) * width for k in range(len(names))]
            ax.bar(xs, [by[n, method][key] for n in names], width, label=method)
        ax.set_xticks(range(len(names)), [os.path.basename(n.rstrip("/")) or n for n in names], rotation=15)
        ax.set_title(title)
        low = min(r[key] for r in rows)
        ax.set_ylim(low * 0.95, max(r[key] for r in rows) * 1.01)
    axes[0].legend(title="segmentation")
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""parbpe eval --plot: bytes/token and Rényi efficiency of each tokenizer by method, side by side, as a
PNG (matplotlib, from the `plot` extra: imported only here); and, for a tokenizer that is the output
of a run with --also-save and --heldout, its held-out bytes/token against vocabulary size (the
numbers of its stats.json: "also_save" and "heldout")."""

from __future__ import annotations

import json
import os


def size_curve(directory: str) -> list[tuple[int, float]]:
    """(vocabulary size, held-out bytes/token) of a run's --also-save sizes and its own, from its
    stats.json; [] when it has none (no --also-save, no --heldout, or not a run's directory)."""
    try:
        with open(os.path.join(directory, "stats.json")) as f:
            stats = json.load(f)
    except (OSError, ValueError):
        return []
    points = [(r["vocab_size"], r["bytes_per_token"]) for r in stats.get("also_save", []) if "bytes_per_token" in r]
    if not points or "bytes_per_token" not in stats.get("heldout", {}):
        return []
    return sorted(points + [(stats["vocab_size"], stats["heldout"]["bytes_per_token"])])


def check_plot_available() -> None:
    """Refuse --plot where matplotlib (the plot extra) is not installed, before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'parbpe[plot]'") from None


def plot_rows(rows: list[dict], path: str, alpha: float, curves: dict[str, list[tuple[int, float]]] | None = None
              ) -> None:
    """Two bar charts (bytes/token, Rényi efficiency), a group of bars per tokenizer, a bar per method;
    a third panel with each curve of `curves` (name -> (vocabulary size, held-out bytes/token))."""
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
    curves = {name: points for name, points in (curves or {}).items() if points}
    panels = 3 if curves else 2
    fig, axes = plt.subplots(1, panels, figsize=(max(6.0, 2.2 * len(names) + 2) + 4 * (panels - 2), 4),
                             constrained_layout=True)
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
    if curves:
        for name, points in curves.items():
            axes[2].plot([p[0] for p in points], [p[1] for p in points], marker="o",
                         label=os.path.basename(name.rstrip("/")) or name)
        axes[2].set_xscale("log", base=2)
        axes[2].set_xlabel("vocabulary size (--also-save sizes and the run's)")
        axes[2].set_title("held-out bytes per token, by size (stats.json)")
        axes[2].legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)

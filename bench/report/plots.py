"""The two PNGs BENCHMARKS.md shows: latency distributions and transactions per 1,000 items."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.peers import LABELS

ORDER = ("app", "a", "b", "c", "d")


def write(document: dict[str, Any], directory: Path, prefix: str) -> list[Path]:
    return [
        latency_plot(document, directory / f"{prefix}-latency.png"),
        transactions_plot(document, directory / f"{prefix}-transactions.png"),
    ]


def latency_plot(document: dict[str, Any], path: Path) -> Path:
    systems = document["latency"]["systems"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, title in (
        (axes[0], "first_item_samples_s", "submit acknowledged → first item handled"),
        (axes[1], "batch_done_samples_s", "submit acknowledged → batch completed"),
    ):
        for kind in ORDER:
            samples = sorted(max(s, 1e-3) for s in systems[kind][key])
            if not samples:
                continue
            fractions = [(i + 1) / len(samples) for i in range(len(samples))]
            ax.step(samples, fractions, where="post", label=LABELS[kind], linewidth=2 if kind == "app" else 1.2)
        ax.set_xscale("log")
        ax.set_xlabel("seconds (log scale)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of submissions")
    axes[1].legend(loc="lower right", fontsize=8)
    n = systems["app"]["submissions"]
    fig.suptitle(f"Wake latency after idle: {n} submissions of {document['latency']['batch_items']} items each")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def transactions_plot(document: dict[str, Any], path: Path) -> Path:
    tput = document["throughput"]
    labels = [LABELS[k] for k in ORDER]
    values = [tput[k]["transactions_per_1000"] for k in ORDER]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.barh(labels[::-1], values[::-1], color=["#888"] * 4 + ["#1f77b4"])
    ax.set_xscale("log")
    ax.set_xlabel("storage transactions per 1,000 items, enqueue through completion (log scale)")
    for bar, value in zip(bars, values[::-1], strict=True):
        ax.text(value * 1.1, bar.get_y() + bar.get_height() / 2, f"{value:,.1f}", va="center", fontsize=9)
    ax.set_xlim(1, max(values) * 4)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

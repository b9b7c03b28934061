"""The platform model's figure, platform-scale.png: time to drain against backlog size, per handler cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def platform_plot(platform: dict[str, Any], path: Path) -> Path:
    """Time to drain against backlog size, per handler cost: (a) built-in trigger, (b) before, (c) after."""
    costs = sorted({row["cpu_ms_per_item"] for row in platform["grid"]})
    fig, axes = plt.subplots(1, len(costs), figsize=(4 * len(costs), 3.8), sharey=True)
    for ax, cost in zip(axes, costs, strict=True):
        rows = [r for r in platform["grid"] if r["cpu_ms_per_item"] == cost]
        sizes = [r["items"] for r in rows]
        for key, label, style in (
            ("a", "(a) built-in queue trigger", "--"),
            ("b", "(b) queue-drain before", ":"),
            ("c", "(c) queue-drain now", "-"),
        ):
            ax.plot(sizes, [r[key]["drained_s"] for r in rows], style, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("items in the backlog")
        ax.set_title(f"handler: {cost} ms CPU per item", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds to drain (model)")
    axes[-1].legend(loc="upper left", fontsize=8)
    fig.suptitle("Draining on Flex Consumption, as the platform model (bench.platform) has it")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

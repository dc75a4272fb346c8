"""What every benchmark figure ends with: labelled axes, a legend, a tight layout, a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_axes(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str,
              legend_size: int = 8) -> None:
    """Label `ax`, add its legend, write `fig` to `path` (120 dpi) and close it."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

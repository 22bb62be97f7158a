"""The memory timeline as a picture: bytes alive at every step, planned against naive.

Example:
    >>> plot_timeline(report, "memory.png")  # doctest: +SKIP
"""
from __future__ import annotations

from portable.memory.report import MemoryReport

MB = 1 << 20


def plot_timeline(report: MemoryReport, path: str) -> str:
    """Draw ``report``'s timeline into the PNG file ``path`` (needs matplotlib); returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from portable.io.atomic import atomic_write_bytes

    steps = range(len(report.timeline))
    floor = max(report.lower_bound_bytes, 1) / MB / 200  # log scale: empty steps sit here

    def mib(values):
        return [max(b / MB, floor) for b in values]

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    ax.plot(steps, mib(report.naive_timeline), color="tab:red", lw=1.5,
            label=f"naive: every value its own block ({report.naive_bytes / MB:.1f} MiB)")
    ax.plot(steps, mib(report.timeline), color="tab:blue", lw=1.5,
            label="planned: bytes alive at each step")
    ax.axhline(report.planned_bytes / MB, color="tab:blue", ls="--", lw=1,
               label=f"planned arena ({report.strategy}): {report.planned_bytes / MB:.1f} MiB")
    ax.axhline(report.lower_bound_bytes / MB, color="black", ls=":", lw=1,
               label=f"liveness lower bound: {report.lower_bound_bytes / MB:.1f} MiB")
    what = "training step" if report.train else "prediction"
    batch = f", batch {report.batch}" if report.batch else ""
    ax.set_title(f"{report.model or 'graph'}: memory of one {what}{batch}")
    ax.set_xlabel("step (kernel call, in execution order)")
    ax.set_ylabel("MiB (intermediates and outputs)")
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path

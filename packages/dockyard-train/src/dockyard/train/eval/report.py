"""What an evaluation writes: ``results.json`` (every model's summary and settings),
``samples.jsonl`` (one line per sample: model, task id, ground truth, response, answer,
verdict), ``table.md`` (the printed table: one row per model, then the breakdowns) and
``plot.png`` (the metrics per model, and the first breakdown; needs matplotlib, as the GRPO
reward plot does)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _fmt(v: float) -> str:
    return "—" if isinstance(v, float) and math.isnan(v) else f"{100 * v:.1f}"


def metric_keys(summary: dict[str, Any]) -> list[str]:
    return [k for k in summary["overall"] if k.startswith(("pass@", "maj@"))]


def table(results: list[dict[str, Any]]) -> str:
    """A Markdown table of every model's overall metrics (%), then one per breakdown key."""
    keys = metric_keys(results[0]["summary"])
    lines = [
        "| model | tasks | " + " | ".join(keys) + " | infra errors |",
        "|---|---:|" + "---:|" * len(keys) + "---:|",
    ]
    for r in results:
        o = r["summary"]["overall"]
        cells = [_fmt(o[k]) for k in keys]
        lines.append(
            f"| {r['label']} | {int(o['tasks'])} | "
            + " | ".join(cells)
            + f" | {int(o['infra_errors'])} |"
        )
    for group in results[0]["summary"]["by"]:
        head = keys[0]
        values = list(results[0]["summary"]["by"][group])
        lines += ["", f"{head} by {group}:", ""]
        lines.append("| model | " + " | ".join(values) + " |")
        lines.append("|---|" + "---:|" * len(values))
        for r in results:
            by = r["summary"]["by"][group]
            lines.append(
                f"| {r['label']} | " + " | ".join(_fmt(by[v][head]) for v in values) + " |"
            )
    return "\n".join(lines)


def write(out: Path, results: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, str]:
    """Write the files of the module docstring into ``out``; returns their paths by kind."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "results": out / "results.json",
        "samples": out / "samples.jsonl",
        "table": out / "table.md",
    }
    summaries = [{k: r[k] for k in ("label", "model", "summary", "seconds")} for r in results]
    paths["results"].write_text(json.dumps({"settings": settings, "models": summaries}, indent=2))
    with paths["samples"].open("w") as f:
        for r in results:
            for s in r["samples"]:
                f.write(json.dumps({"model": r["label"], **s}, default=str) + "\n")
    paths["table"].write_text(table(results) + "\n")
    written = {k: str(v) for k, v in paths.items()}
    try:
        written["plot"] = str(plot(out / "plot.png", results))
    except ImportError as e:
        print(f"dockyard eval: no plot ({e})", flush=True)
    return written


def plot(png: Path, results: list[dict[str, Any]]) -> Path:
    """Grouped bars: every metric per model; beside them the first metric per value of the
    first breakdown key."""
    try:
        import matplotlib  # lazy: matplotlib is optional (plot extra)
    except ImportError as e:
        raise ImportError(
            'the evaluation plot needs matplotlib: pip install "dockyard-train[plot]"'
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after choosing the Agg backend above

    keys = metric_keys(results[0]["summary"])
    groups = list(results[0]["summary"]["by"])
    fig, axes = plt.subplots(
        1, 2 if groups else 1, figsize=(12 if groups else 6, 4), dpi=110, squeeze=False
    )
    width = 0.8 / len(results)

    def bars(ax: Any, names: list[str], value: Any, title: str) -> None:
        for j, r in enumerate(results):
            ys = [100 * value(r, n) for n in names]
            ax.bar([i + j * width for i in range(len(names))], ys, width, label=r["label"])
        ax.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(names))])
        tilt = len(names) > 3 or max(len(n) for n in names) > 10
        ax.set_xticklabels(names, rotation=30 if tilt else 0, ha="right" if tilt else "center")
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")

    bars(axes[0][0], keys, lambda r, k: r["summary"]["overall"][k], "overall")
    axes[0][0].legend(fontsize=8)
    if groups:
        g = groups[0]
        values = list(results[0]["summary"]["by"][g])
        bars(
            axes[0][1], values, lambda r, v: r["summary"]["by"][g][v][keys[0]], f"{keys[0]} by {g}"
        )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png

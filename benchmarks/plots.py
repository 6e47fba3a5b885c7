"""The benchmark's Plotly report: speedup against α with the Leviathan bound, and the decode time breakdown.

HTML always (plotly.js from its CDN, so the file stays small); PNG too when `kaleido` is installed.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from benchmarks.common import leviathan_bound

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def speedup_figure(rows: list[dict], title: str) -> go.Figure:
    """Left: speedup over our target-only loop with the bound; right: speedup over generate()."""
    figure = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "speedup over specdec target-only, and the bound",
            "speedup over transformers generate()",
        ),
    )
    drafts = sorted({row["draft"] for row in rows if row["draft"]})
    alphas = [i / 100 for i in range(0, 101)]
    for colour, draft in zip(COLOURS, drafts, strict=False):
        ours = [
            r
            for r in rows
            if r["draft"] == draft and r["engine"] == "specdec" and r["planted_alpha"] is not None
        ]
        theirs = [
            r
            for r in rows
            if r["draft"] == draft and r["engine"] == "assisted" and r["planted_alpha"] is not None
        ]
        if not ours:
            continue
        k = ours[0]["k"]
        cost_ratio = statistics.median(r["cost_ratio"] for r in ours)
        x = [r["alpha"] for r in ours]
        figure.add_scatter(
            x=x, y=[r["speedup_vs_target_loop"] for r in ours], mode="markers", marker={"color": colour},
            name=f"specdec {draft} k={k}", legendgroup=draft, row=1, col=1,
        )  # fmt: skip
        figure.add_scatter(
            x=alphas, y=[leviathan_bound(a, k, cost_ratio) for a in alphas], mode="lines",
            line={"color": colour, "dash": "dash"}, name=f"bound {draft} (k={k}, c={cost_ratio:.3f})",
            legendgroup=draft, row=1, col=1,
        )  # fmt: skip
        figure.add_scatter(
            x=x, y=[r["speedup_vs_generate"] for r in ours], mode="markers+lines", marker={"color": colour},
            name=f"specdec {draft} k={k} vs generate()", legendgroup=draft, showlegend=False, row=1, col=2,
        )  # fmt: skip
        if theirs:
            figure.add_scatter(
                x=[r["planted_alpha"] for r in theirs], y=[r["speedup_vs_generate"] for r in theirs],
                mode="markers+lines", marker={"color": colour, "symbol": "x"}, line={"dash": "dot"},
                name=f"transformers assisted {draft} k={k}", legendgroup=draft, row=1, col=2,
            )  # fmt: skip
    figure.add_hline(y=1.0, line={"color": "grey", "width": 1}, row=1, col=2)
    figure.update_xaxes(title_text="acceptance rate α (controlled)")
    figure.update_yaxes(title_text="speedup (decode phase)")
    figure.update_layout(title=title, height=480, width=1100, template="plotly_white")
    return figure


def breakdown_figure(rows: list[dict], title: str) -> go.Figure:
    """Decode seconds per configuration: draft, target passes and the rest (transformers: total only)."""
    names = [row["config"] for row in rows]
    draft = [row.get("draft_seconds", 0.0) for row in rows]
    verify = [
        row.get("verify_seconds", row["decode_seconds"] if row["engine"] == "specdec" else 0.0)
        for row in rows
    ]
    other = [row["decode_seconds"] - d - v for row, d, v in zip(rows, draft, verify, strict=True)]
    figure = go.Figure()
    figure.add_bar(y=names, x=verify, name="target passes (specdec)", orientation="h")
    figure.add_bar(y=names, x=draft, name="draft (specdec)", orientation="h")
    figure.add_bar(y=names, x=other, name="other (transformers: all of it)", orientation="h")
    figure.update_layout(
        barmode="stack", title=title, xaxis_title="decode seconds (sum over clips, median over rounds)",
        height=max(400, 22 * len(rows) + 150), width=1100, template="plotly_white",
        yaxis={"autorange": "reversed"},
    )  # fmt: skip
    return figure


def write_report(rows: list[dict], out_dir: Path, title: str) -> list[Path]:
    """bench.html (both figures) and, when kaleido is importable, one PNG per figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {"speedup": speedup_figure(rows, title), "breakdown": breakdown_figure(rows, title)}
    html = out_dir / "bench.html"
    parts = [
        figure.to_html(full_html=False, include_plotlyjs="cdn" if i == 0 else False)
        for i, figure in enumerate(figures.values())
    ]
    html.write_text(
        f"<html><head><meta charset='utf-8'><title>{title}</title></head><body>{''.join(parts)}</body></html>"
    )
    written = [html]
    try:
        import kaleido  # noqa: F401
    except ImportError:
        print("note: kaleido is not installed; PNG export skipped (pip install kaleido)")
        return written
    for name, figure in figures.items():
        path = out_dir / f"bench-{name}.png"
        figure.write_image(path, scale=1.5)
        written.append(path)
    return written


def batch_figure(rows: list[dict], title: str) -> go.Figure:
    """`bench --batch`: left, speedup over the batched target alone; right, tokens/s, against batch size."""
    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("speedup over the batched target alone", "throughput (tokens/s)")
    )
    configs = list(dict.fromkeys(row["config"] for row in rows))
    for colour, config in zip(COLOURS, configs, strict=False):
        mine = [row for row in rows if row["config"] == config]
        sizes = [row["batch_size"] for row in mine]
        if mine[0]["draft"]:
            for key, dash in (("speedup_steady", "solid"), ("speedup_decode", "dot")):
                label = "steady" if key == "speedup_steady" else "whole decode"
                figure.add_scatter(
                    x=sizes, y=[row[key] for row in mine], name=f"{config} ({label})", row=1, col=1,
                    line={"color": colour, "dash": dash},
                )  # fmt: skip
        figure.add_scatter(
            x=sizes, y=[row["tokens_per_second"] for row in mine], name=f"{config} tokens/s", row=1, col=2,
            line={"color": colour},
        )  # fmt: skip
    figure.update_xaxes(type="log", dtick=0.30103, title_text="batch size")
    figure.update_layout(title=title, height=420)
    return figure


def write_batch_report(rows: list[dict], out_dir: Path, title: str) -> Path:
    """batch.html: the batch-scaling figure (plotly.js from its CDN)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "batch.html"
    path.write_text(batch_figure(rows, title).to_html(include_plotlyjs="cdn"))
    return path

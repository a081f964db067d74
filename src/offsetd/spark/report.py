"""`report`: one self-contained HTML page (PNG plots embedded as data: URIs) built from the
pipelines' Parquet outputs - lag over time per group, commit rate, expiry timeline - plus the
reset audit as a table. Spark aggregates; only small results reach the driver for plotting.
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import matplotlib

matplotlib.use("Agg")  # no display: render to PNG bytes
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd

MAX_GROUPS = 12  # lines per plot; the busiest groups are shown
MAX_EXPIRY_GROUPS = 25  # bars in the expiry timeline; the soonest-expiring groups are shown
MAX_TABLE_ROWS = 200


def _png(draw: Callable[[plt.Axes], None], title: str) -> str:
    """Render one plot to an <img> tag with the PNG inline."""
    fig, ax = plt.subplots(figsize=(10, 4), dpi=90)
    draw(ax)
    locator = mdates.AutoDateLocator()  # every plot runs over time; labels as precise as the span needs
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{html.escape(title)}" src="data:image/png;base64,{data}">'


def _top_groups(df: DataFrame, weight: str) -> list[str]:
    """The MAX_GROUPS groups with the largest sum of `weight`."""
    rows = df.groupBy("group").agg(F.sum(weight).alias("w")).orderBy(F.desc("w")).limit(MAX_GROUPS).collect()
    return [r["group"] for r in rows]


def _group_lines(rows: pd.DataFrame, x: str, y: str, ylabel: str, title: str, plot: Callable[..., object]) -> str:
    """One line per group of `rows` (pandas: group, x, y) drawn with `plot(ax, xs, ys, label=)`,
    with a legend when there are any."""
    def draw(ax: plt.Axes) -> None:
        """One line per group."""
        for group, per_group in rows.groupby("group"):
            plot(ax, per_group[x], per_group[y], label=group)
        ax.set_ylabel(ylabel)
        if len(rows):
            ax.legend(fontsize="small")
    return _png(draw, title)


def lag_plot(lag: DataFrame) -> str:
    """Total lag per group over time (sum over partitions of each partition's latest sample)."""
    groups = _top_groups(lag.where(F.col("lag").isNotNull()), "lag")
    per_time = (lag.where(F.col("group").isin(groups) & F.col("lag").isNotNull())
                .groupBy("group", "time").agg(F.sum("lag").alias("lag")).orderBy("time").toPandas())
    return _group_lines(per_time, "time", "lag", "lag (records)", "Lag over time per group",
                        lambda ax, xs, ys, label: ax.step(xs, ys, where="post", label=label))


def commit_rate_plot(commits: DataFrame) -> str:
    """Commits per minute per group."""
    groups = _top_groups(commits.withColumn("one", F.lit(1)), "one")
    per_minute = (commits.where(F.col("group").isin(groups))
                  .groupBy("group", F.date_trunc("minute", "commit_time").alias("minute"))
                  .count().orderBy("minute").toPandas())
    return _group_lines(per_minute, "minute", "count", "commits per minute", "Commit rate",
                        lambda ax, xs, ys, label: ax.plot(xs, ys, marker="o", label=label))


def expiry_plot(forecast: DataFrame) -> str:
    """Per group, the span from its first to its last offset expiry (never-expiring offsets left out)."""
    spans = (forecast.where(F.col("expires_at").isNotNull()).groupBy("group")
             .agg(F.min("expires_at").alias("first"), F.max("expires_at").alias("last"), F.count("*").alias("n"))
             .orderBy("first").limit(MAX_EXPIRY_GROUPS).toPandas())

    def draw(ax: plt.Axes) -> None:
        """One bar per group from its first to its last expiry, a tick at the first."""
        for i, row in enumerate(spans.itertuples()):
            ax.plot([row.first, row.last], [i, i], linewidth=6, solid_capstyle="butt")
            ax.plot([row.first], [i], marker="|", markersize=14, color="black")
        ax.set_yticks(range(len(spans)), [f"{g} ({n})" for g, n in zip(spans["group"], spans["n"])],
                      fontsize="small")
        ax.set_xlabel("expires at (UTC)")
    return _png(draw, "Expiry timeline (first to last offset expiry per group)")


def _table(df: DataFrame, columns: list[str]) -> str:
    """An HTML table of the first MAX_TABLE_ROWS rows."""
    rows = df.select(*columns).limit(MAX_TABLE_ROWS).collect()
    if not rows:
        return "<p>None found.</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


SECTIONS: list[tuple[str, str, Callable[[DataFrame], str]]] = [
    ("lag-history", "Lag", lag_plot),
    ("commit-history", "Commits", commit_rate_plot),
    ("expiry-forecast", "Expiry", expiry_plot),
    ("reset-audit", "Resets and rewinds",
     lambda df: _table(df.orderBy("commit_timestamp"), ["commit_time", "group", "topic", "partition", "kind",
                                                        "from_offset", "to_offset", "committer", "members"])),
]

# Marks the body with how many plots decoded and rendered (for headless-browser checks).
LOADED_SCRIPT = ("addEventListener('load',()=>{document.body.dataset.plotsRendered="
                 "[...document.images].filter(i=>i.complete&&i.naturalWidth>0).length})")
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1000px}img.plot{width:100%}"
         "table{border-collapse:collapse;font-size:small}td,th{border:1px solid #ccc;padding:2px 6px}")


def build_report(spark: SparkSession, outputs: str, target: str) -> str:
    """Write `target` (HTML) from the pipeline outputs under `outputs`/<name>; missing outputs
    get a note instead of a plot. Returns the target path."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>offsetd offsets report</title>"
             f"<style>{STYLE}</style></head><body><h1>Consumer offsets report</h1>"
             f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} from {html.escape(outputs)}.</p>"]
    for name, heading, render in SECTIONS:
        parts.append(f"<h2 id='{name}'>{heading}</h2>")
        path = Path(outputs) / name
        if not (path / "_SUCCESS").exists():  # Spark writes the marker last: a complete output
            parts.append(f"<p class='missing'>No {name} output (run <code>offsetd spark {name}</code>).</p>")
            continue
        parts.append(render(spark.read.parquet(str(path))))
    parts.append(f"<script>{LOADED_SCRIPT}</script></body></html>")
    Path(target).write_text("\n".join(parts), encoding="utf-8")
    return target

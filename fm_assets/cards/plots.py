"""The SVG plots of a dataset card: where records went, and document lengths.

Every bar carries a tooltip (an SVG `<title>`) with its exact figure, so a reader hovering the
card in a browser, or a script reading the file, gets the numbers behind the picture.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fm_assets.cards.data import PERCENTILES, CardData, StageFlow
from fm_assets.cards.svg import SvgCanvas, nice_ticks, text_width, tick_label

# File names beside the card; the Markdown references the plots by these names.
WATERFALL_PLOT = "waterfall.svg"
TOKENS_PLOT = "tokens_per_document.svg"
CHARACTERS_PLOT = "characters_per_document.svg"

BLUE, RED, GREEN, ORANGE, GRID = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#e5e5e5"
WIDTH = 800
ROW_PX, BAR_PX = 24, 16
TOP_PX, BOTTOM_PX = 44, 52
MAX_LABEL_PX = 380
HISTOGRAM_HEIGHT = 400
HISTOGRAM_BINS = 50
# One dash pattern per percentile line (p50, p90, p99), as dotted, dashed and dash-dot.
PERCENTILE_DASHES = ("2,3", "7,4", "7,3,2,3")


def card_plots(data: CardData) -> dict[str, bytes]:
    """File name -> SVG bytes of every plot of the card."""
    return {
        WATERFALL_PLOT: waterfall_plot(data.flows),
        TOKENS_PLOT: histogram_plot(data.token_lengths, "tokens per document"),
        CHARACTERS_PLOT: histogram_plot(data.character_lengths, "characters per document"),
    }


def waterfall_plot(flows: list[StageFlow]) -> bytes:
    """Horizontal bars: records in, each stage's drops by rule, documents kept."""
    labels, lefts, widths, colors = ["records in"], [0], [flows[0].records_in], [BLUE]
    level = flows[0].records_in
    for flow in flows:
        drops = dict(flow.quarantined)
        if flow.unaccounted:
            drops["(unaccounted)"] = flow.unaccounted
        for rule, count in drops.items():
            level -= count
            labels.append(f"{flow.stage.removesuffix('_documents')}: {rule}")
            lefts.append(level)
            widths.append(count)
            colors.append(RED)
    labels.append("documents kept")
    lefts.append(0)
    widths.append(flows[-1].kept)
    colors.append(GREEN)
    texts = [f"{widths[0]:,}", *(f"{-w:+,}" for w in widths[1:-1]), f"{widths[-1]:,}"]

    label_px = min(max(text_width(label) for label in labels) + 16, MAX_LABEL_PX)
    plot_left, plot_width = label_px, WIDTH - label_px - 90
    height = TOP_PX + ROW_PX * len(labels) + BOTTOM_PX
    axis_y = TOP_PX + ROW_PX * len(labels)
    widest = max(left + width for left, width in zip(lefts, widths, strict=True))
    ticks = nice_ticks(0, max(widest, 1), 6, integer=True)

    def x(value: float) -> float:
        return plot_left + value / ticks[-1] * plot_width

    canvas = SvgCanvas(WIDTH, height, "Where the version's records went")
    canvas.text(WIDTH / 2, 26, "Where the version's records went", "middle", 14, "bold")
    for tick in ticks:
        canvas.line(x(tick), TOP_PX, x(tick), axis_y, GRID)
        canvas.text(x(tick), axis_y + 16, tick_label(tick), "middle", 11)
    for row, (label, left, width, color, text) in enumerate(
        zip(labels, lefts, widths, colors, texts, strict=True)
    ):
        top = TOP_PX + row * ROW_PX + (ROW_PX - BAR_PX) / 2
        canvas.rect(x(left), top, x(left + width) - x(left), BAR_PX, color, f"{label}: {text}")
        canvas.text(plot_left - 8, top + BAR_PX - 4, label, "end")
        canvas.text(x(left + width) + 4, top + BAR_PX - 4, text)
    canvas.line(plot_left, axis_y, plot_left + plot_width, axis_y)
    canvas.line(plot_left, TOP_PX, plot_left, axis_y)
    canvas.text(plot_left + plot_width / 2, height - 12, "records", "middle")
    return canvas.to_bytes()


def histogram_plot(values: npt.NDArray[np.int64], what: str) -> bytes:
    """A histogram of `values` per document, with the card's percentiles marked."""
    title = what.capitalize()
    left, right, top, bottom = 70.0, WIDTH - 20.0, float(TOP_PX), HISTOGRAM_HEIGHT - 52.0
    canvas = SvgCanvas(WIDTH, HISTOGRAM_HEIGHT, title)
    canvas.text(WIDTH / 2, 26, title, "middle", 14, "bold")
    canvas.text((left + right) / 2, HISTOGRAM_HEIGHT - 12, what, "middle")
    canvas.text(18, (top + bottom) / 2, "documents", "middle", rotate=True)
    if not values.size:
        canvas.text((left + right) / 2, (top + bottom) / 2, "no documents", "middle")
        canvas.line(left, bottom, right, bottom)
        canvas.line(left, top, left, bottom)
        return canvas.to_bytes()

    counts, edges = np.histogram(values, bins=min(HISTOGRAM_BINS, len(np.unique(values))))
    x_ticks = nice_ticks(float(edges[0]), float(edges[-1]))
    y_ticks = nice_ticks(0, float(counts.max()), 6, integer=True)

    def x(value: float) -> float:
        return left + (value - x_ticks[0]) / (x_ticks[-1] - x_ticks[0]) * (right - left)

    def y(count: float) -> float:
        return bottom - count / y_ticks[-1] * (bottom - top)

    for tick in y_ticks:
        canvas.line(left, y(tick), right, y(tick), GRID)
        canvas.text(left - 6, y(tick) + 4, tick_label(tick), "end", 11)
    for tick in x_ticks:
        canvas.line(x(tick), bottom, x(tick), bottom + 4)
        canvas.text(x(tick), bottom + 17, tick_label(tick), "middle", 11)
    bins = zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist(), strict=True)
    for count, low, high in bins:
        if count:
            tooltip = f"{count:,} documents with {low:,.0f} to {high:,.0f} {what.split()[0]}"
            canvas.rect(x(low), y(count), x(high) - x(low), bottom - y(count), BLUE, tooltip)
    points = np.percentile(values, PERCENTILES)
    for row, (p, value, dash) in enumerate(
        zip(PERCENTILES, points.tolist(), PERCENTILE_DASHES, strict=True)
    ):
        canvas.line(x(value), top, x(value), bottom, ORANGE, dash, 1.5)
        legend_y = top + 14 + row * 18  # the legend, top right
        canvas.line(right - 150, legend_y - 4, right - 122, legend_y - 4, ORANGE, dash, 1.5)
        canvas.text(right - 116, legend_y, f"p{p} {value:,.0f}")
    canvas.line(left, bottom, right, bottom)
    canvas.line(left, top, left, bottom)
    return canvas.to_bytes()

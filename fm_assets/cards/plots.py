"""The PNG plots of a dataset card (matplotlib): where records went, and document lengths."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fm_assets.cards.data import PERCENTILES, CardData, StageFlow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# File names beside the card; the Markdown references the plots by these names.
WATERFALL_PLOT = "waterfall.png"
TOKENS_PLOT = "tokens_per_document.png"
CHARACTERS_PLOT = "characters_per_document.png"


def card_plots(data: CardData) -> dict[str, bytes]:
    """File name -> PNG bytes of every plot of the card."""
    return {
        WATERFALL_PLOT: waterfall_plot(data.flows),
        TOKENS_PLOT: histogram_plot(data.token_lengths, "tokens per document"),
        CHARACTERS_PLOT: histogram_plot(data.character_lengths, "characters per document"),
    }


def waterfall_plot(flows: list[StageFlow]) -> bytes:
    """Horizontal bars: records in, each stage's drops by rule, documents kept."""
    labels, lefts, widths, colors = ["records in"], [0], [flows[0].records_in], ["tab:blue"]
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
            colors.append("tab:red")
    labels.append("documents kept")
    lefts.append(0)
    widths.append(flows[-1].kept)
    colors.append("tab:green")
    # matplotlib is imported where a plot is drawn: every `fm` command and Dagster process
    # loads this module with the definitions, and only card builds draw.
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 1.5 + 0.35 * len(labels)), layout="constrained")
    axes = figure.subplots()
    positions = np.arange(len(labels))
    bars = axes.barh(positions, widths, left=lefts, color=colors)
    texts = [f"{widths[0]:,}", *(f"{-w:+,}" for w in widths[1:-1]), f"{widths[-1]:,}"]
    axes.bar_label(bars, texts, padding=3)
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("records")
    axes.set_title("Where the version's records went")
    return _png(figure)


def histogram_plot(values: npt.NDArray[np.int64], what: str) -> bytes:
    """A histogram of `values` per document, with the card's percentiles marked."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.subplots()
    if values.size:
        axes.hist(values, bins=min(50, len(np.unique(values))), color="tab:blue")
        points = np.percentile(values, PERCENTILES)
        for p, v, style in zip(PERCENTILES, points, (":", "--", "-."), strict=True):
            axes.axvline(float(v), color="tab:orange", linestyle=style, label=f"p{p} {v:,.0f}")
        axes.legend(loc="upper right")  # "best" costs a second of layout search per plot
    else:
        axes.text(0.5, 0.5, "no documents", ha="center", va="center", transform=axes.transAxes)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(what)
    axes.set_ylabel("documents")
    axes.set_title(f"{what.capitalize()}")
    return _png(figure)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    # No "Software" entry: the bytes then depend on the data and matplotlib's renderer only.
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()

"""A small SVG canvas for the dataset card's charts: rectangles, lines and text, written as text.

The card's plots are a bar chart and two histograms. Drawing them as SVG takes milliseconds, where
importing matplotlib took about a second of every `fm version create`; SVG also stays sharp at any
zoom, renders in Markdown viewers and browsers, and its bytes depend on the data alone.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape, quoteattr

FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
# Average advance of a character at 12 px in the card's sans-serif fonts, to size label columns.
CHAR_WIDTH_PX = 7.0


def _n(value: float) -> str:
    """A coordinate with at most two decimals (stable bytes, small files)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


class SvgCanvas:
    """An SVG image built element by element; `to_bytes` closes it."""

    def __init__(self, width: float, height: float, title: str) -> None:
        self._parts = [
            "<?xml version='1.0' encoding='UTF-8'?>",
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{_n(width)}' "
            f"height='{_n(height)}' viewBox='0 0 {_n(width)} {_n(height)}' {FONT} "
            "font-size='12'>",
            f"<title>{escape(title)}</title>",
            f"<rect width='{_n(width)}' height='{_n(height)}' fill='white'/>",
        ]

    def rect(
        self, x: float, y: float, width: float, height: float, fill: str, tooltip: str = ""
    ) -> None:
        """A filled rectangle; `tooltip` shows on hover (and names the bar for readers)."""
        shape = (
            f"<rect x='{_n(x)}' y='{_n(y)}' width='{_n(max(width, 0.0))}' "
            f"height='{_n(max(height, 0.0))}' fill='{fill}'"
        )
        if tooltip:
            self._parts.append(f"{shape}><title>{escape(tooltip)}</title></rect>")
        else:
            self._parts.append(f"{shape}/>")

    def line(
        self,
        x1: float,
        y1: float,
        x2: float,
        y2: float,
        stroke: str = "#333333",
        dash: str = "",
        width: float = 1.0,
    ) -> None:
        dashes = f" stroke-dasharray='{dash}'" if dash else ""
        self._parts.append(
            f"<line x1='{_n(x1)}' y1='{_n(y1)}' x2='{_n(x2)}' y2='{_n(y2)}' "
            f"stroke='{stroke}' stroke-width='{_n(width)}'{dashes}/>"
        )

    def text(
        self,
        x: float,
        y: float,
        content: str,
        anchor: str = "start",
        size: int = 12,
        weight: str = "normal",
        rotate: bool = False,
    ) -> None:
        """Text whose baseline starts (or, by `anchor`, is centred or ends) at (x, y)."""
        turn = f" transform='rotate(-90 {_n(x)} {_n(y)})'" if rotate else ""
        bold = " font-weight='bold'" if weight != "normal" else ""
        self._parts.append(
            f"<text x='{_n(x)}' y='{_n(y)}' text-anchor={quoteattr(anchor)} "
            f"font-size='{size}'{bold}{turn}>{escape(content)}</text>"
        )

    def to_bytes(self) -> bytes:
        return ("\n".join([*self._parts, "</svg>"]) + "\n").encode()


def text_width(content: str, size: int = 12) -> float:
    """Estimated width in pixels of `content` at `size` px (no font metrics at hand)."""
    return len(content) * CHAR_WIDTH_PX * size / 12


def nice_ticks(low: float, high: float, most: int = 6, *, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten, at most
    `most` ticks; whole numbers only when `integer`."""
    if not math.isfinite(low) or not math.isfinite(high):
        raise ValueError(f"ticks need finite bounds, got {low}..{high}")
    if high <= low:
        high = low + 1
    raw = (high - low) / max(most - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def tick_label(value: float) -> str:
    """A tick value as a reader expects it: thousands separated, no needless decimals."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")

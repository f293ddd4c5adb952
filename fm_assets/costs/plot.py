"""The cost report's plot: one horizontal bar per team, split into storage, cache and compute.

With prices, the bars are money; without, each segment is the team's share of that category's
measured total (a team with half the storage and none of the compute fills half the storage
third). Plain SVG, no plotting library.
"""

from __future__ import annotations

from html import escape

from fm_assets.costs.report import CostReport, CostRow

COLORS = {"storage": "#4e79a7", "cache": "#f28e2b", "compute": "#59a14f"}
_WIDTH, _LABEL, _BAR, _GAP = 720, 140, 22, 10


def _segments(report: CostReport, totals: dict[str, CostRow]) -> dict[str, dict[str, float]]:
    if report.prices is not None:
        return {
            team: {k: v for k, v in (row.costs(report.prices) or {}).items() if k in COLORS}
            for team, row in totals.items()
        }
    measured = {
        "storage": sum(r.storage_byte_hours for r in totals.values()),
        "cache": sum(r.cache_byte_hours for r in totals.values()),
        "compute": sum(r.cpu_seconds + r.gpu_seconds for r in totals.values()),
    }
    return {
        team: {
            "storage": row.storage_byte_hours / measured["storage"] if measured["storage"] else 0,
            "cache": row.cache_byte_hours / measured["cache"] if measured["cache"] else 0,
            "compute": (row.cpu_seconds + row.gpu_seconds) / measured["compute"]
            if measured["compute"]
            else 0,
        }
        for team, row in totals.items()
    }


def cost_plot(report: CostReport) -> bytes:
    """The SVG of the report's per-team bars."""
    totals = report.team_totals()
    segments = _segments(report, totals)
    largest = max((sum(s.values()) for s in segments.values()), default=0.0) or 1.0
    unit = report.prices.currency if report.prices else "share of each category"
    height = 60 + len(segments) * (_BAR + _GAP) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="14">Cost per team, {report.since:%Y-%m-%d} to '
        f"{report.until:%Y-%m-%d %H:%M} UTC ({escape(unit)})</text>",
    ]
    span = _WIDTH - _LABEL - 120
    for i, (team, parts) in enumerate(sorted(segments.items())):
        y = 40 + i * (_BAR + _GAP)
        out.append(f'<text x="10" y="{y + 15}">{escape(team)}</text>')
        x = float(_LABEL)
        for name in COLORS:
            width = span * parts.get(name, 0.0) / largest
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_BAR}" '
                f'fill="{COLORS[name]}"><title>{name}: {parts.get(name, 0.0):.4f}</title></rect>'
            )
            x += width
        out.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{sum(parts.values()):.4f}</text>')
    legend_y = height - 15
    for j, (name, color) in enumerate(COLORS.items()):
        out.append(
            f'<rect x="{10 + j * 110}" y="{legend_y - 10}" width="12" height="12" fill="{color}"/>'
        )
        out.append(f'<text x="{26 + j * 110}" y="{legend_y}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out).encode()

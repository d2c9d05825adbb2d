"""A small SVG writer for the report page: rectangles, text, lines, polylines and circles, every text escaped.

Each figure is one ``<svg role="img">`` with an ``aria-label`` and a ``<title>`` (what a screen reader and the
browser test read), drawn at a fixed size in user units and scaled by the page (``viewBox`` + CSS
``max-width: 100%``). Cells may carry their own ``<title>`` (a hover tooltip with the exact numbers) and
``data-*`` attributes (what the tests compare against the tables). No plotting stack: the page's figures are a few
hundred shapes each.
"""

from __future__ import annotations

import math
from html import escape

FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"

# Bank load colours: untouched, one word (conflict-free), then yellow to red as the busiest bank delivers more.
IDLE = "#eef0f3"
ONE = "#37b24d"
RAMP = ("#ffd43b", "#fab005", "#fd7e14", "#f76707", "#e8590c", "#e03131", "#c92a2a", "#862e2e")


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def _attrs(attrs: dict) -> str:
    out = []
    for k, v in attrs.items():
        if v is None:
            continue
        name = k.rstrip("_").replace("_", "-")
        # geometry to 2 decimals; data-* (what the tests and readers compare) exactly
        text = _num(v) if isinstance(v, float | int) and not name.startswith("data-") else str(v)
        out.append(f' {name}="{escape(text, quote=True)}"')
    return "".join(out)


def load_colour(words: int) -> str:
    """Fill of a cell whose bank delivers ``words`` distinct words in its phase: green for one, then yellow (2) to
    dark red (32) on a log scale, the same in every figure so before and after compare by eye."""
    if words <= 0:
        return IDLE
    if words == 1:
        return ONE
    k = round(math.log2(min(words, 32)) / 5 * (len(RAMP) - 1))
    return RAMP[max(0, min(len(RAMP) - 1, k - 1 if words == 2 else k))]


def hue(k: int, n: int, light: int = 62) -> str:
    """One of ``n`` distinguishable colours (a chunk's or a bank's identity, not a magnitude)."""
    return f"hsl({(k * 360 / max(1, n) + 15) % 360:.0f}, 62%, {light}%)"


class Svg:
    """One figure: shapes appended in drawing order, ``str()`` gives the element."""

    def __init__(self, width: float, height: float, label: str, **attrs):
        self.width, self.height, self.label = width, height, label
        self.attrs = attrs
        self.parts: list[str] = []

    def rect(
        self, x, y, w, h, fill: str, *, title: str | None = None, stroke: str | None = None, **attrs
    ) -> None:
        body = f"<title>{escape(title)}</title>" if title else ""
        tag = f"<rect{_attrs({'x': x, 'y': y, 'width': w, 'height': h, 'fill': fill, 'stroke': stroke, **attrs})}"
        self.parts.append(f"{tag}>{body}</rect>" if body else f"{tag}/>")

    def text(
        self,
        x,
        y,
        s: object,
        *,
        size: float = 11,
        anchor: str = "start",
        weight: str | None = None,
        fill: str = "#212529",
        **attrs,
    ) -> None:
        a = {
            "x": x,
            "y": y,
            "font_size": size,
            "text_anchor": anchor,
            "font_weight": weight,
            "fill": fill,
            **attrs,
        }
        self.parts.append(f"<text{_attrs(a)}>{escape(str(s))}</text>")

    def line(self, x1, y1, x2, y2, stroke: str = "#868e96", width: float = 1, **attrs) -> None:
        a = {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "stroke": stroke, "stroke_width": width, **attrs}
        self.parts.append(f"<line{_attrs(a)}/>")

    def polyline(self, points, stroke: str, width: float = 2, fill: str = "none", **attrs) -> None:
        pts = " ".join(f"{_num(float(x))},{_num(float(y))}" for x, y in points)
        a = {"points": pts, "fill": fill, "stroke": stroke, "stroke_width": width, **attrs}
        self.parts.append(f"<polyline{_attrs(a)}/>")

    def circle(self, x, y, r, fill: str, *, title: str | None = None, **attrs) -> None:
        body = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(
            f"<circle{_attrs({'cx': x, 'cy': y, 'r': r, 'fill': fill, **attrs})}>{body}</circle>"
        )

    def __str__(self) -> str:
        w, h = _num(float(self.width)), _num(float(self.height))
        head = (
            f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="{escape(self.label, quote=True)}" font-family="{FONT}"{_attrs(self.attrs)}>'
        )
        return head + f"<title>{escape(self.label)}</title>" + "".join(self.parts) + "</svg>"


def standalone(figures: list[Svg], title: str, gap: float = 24) -> str:
    """Figures stacked in one standalone SVG document (``analyze --export FILE.svg``)."""
    width = max((f.width for f in figures), default=100)
    height = sum(f.height for f in figures) + gap * max(0, len(figures) - 1) + 30
    out = Svg(width, height, title, xmlns="http://www.w3.org/2000/svg")
    out.rect(0, 0, width, height, "#ffffff")
    out.text(4, 18, title, size=14, weight="bold")
    y = 30.0
    for f in figures:
        out.parts.append(f'<g transform="translate(0,{_num(y)})">{f}</g>')
        y += f.height + gap
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + str(out) + "\n"

"""The book's figure style: a white rounded panel, mid-tone colours, text >= 12 px.

mdBook's column is about 750 px wide and shows an SVG at its own width or narrower.
matplotlib writes an SVG's size in points (72 per inch) and a browser shows a point as
4/3 px, so a figure FIG_W inches wide is FIG_W * 96 px; scaled to the column, a font of
s points renders at s * 4/3 * min(1, 750 / (FIG_W * 96)) px. check_legible() refuses a
figure with any text below 12 px at that width.

Every figure is drawn on a white panel with rounded corners (the page around it stays
the theme's), with dark grey text and the Okabe-Ito colours, so it reads the same in
mdBook's light and dark themes.
"""

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

COLUMN_PX = 750
FIG_W = 8.0          # inches: 768 px, shown at 750
MIN_PX = 12.0

INK = "#222222"      # text and outlines (on the white panel)
MUTED = "#666666"
GRID = "#bbbbbb"
PANEL = "#ffffff"
# Okabe-Ito, readable for colour-blind readers, mid-tone on white.
BLUE, ORANGE, GREEN, PINK = "#0072B2", "#E69F00", "#009E73", "#CC79A7"
SKY, RED, YELLOW, GREY = "#56B4E9", "#D55E00", "#F0E442", "#999999"
LIGHT = {BLUE: "#cfe3f2", ORANGE: "#fbe8c4", GREEN: "#c6eadf", PINK: "#f2dcea",
         SKY: "#d9eefa", RED: "#f6d3bf", GREY: "#e4e4e4"}
SEQ_COLOURS = [BLUE, ORANGE, GREEN, PINK, SKY, RED, GREY]

matplotlib.rcParams.update({
    "figure.max_open_warning": 0,  # the tests draw every figure at once, on purpose
    "font.family": "DejaVu Sans",
    "font.size": 10.5,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10.5,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": "#555555",
    "xtick.color": INK,
    "ytick.color": INK,
    "svg.hashsalt": "pa-book-figures",  # stable ids: the same code gives the same file
    "svg.fonttype": "path",             # no font needed in the reader's browser
})


def min_points(fig_width_in):
    """The smallest font size, in points, that renders at MIN_PX in the column."""
    shown = min(1.0, COLUMN_PX / (fig_width_in * 96.0))
    return MIN_PX / (4.0 / 3.0 * shown)


def figure(height, width=FIG_W):
    """A figure on a white rounded panel."""
    fig = plt.figure(figsize=(width, height))
    fig.patches.append(FancyBboxPatch(
        (0.004, 0.004), 0.992, 0.992, boxstyle="round,pad=0,rounding_size=0.012",
        transform=fig.transFigure, facecolor=PANEL, edgecolor="#c8c8c8", linewidth=0.8,
        zorder=-100, mutation_aspect=width / height))
    return fig


def check_legible(fig):
    """Raise if any visible text of fig would render below MIN_PX in the column."""
    limit = min_points(fig.get_figwidth())
    small = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_fontsize() < limit - 1e-9]
    if small:
        raise ValueError(f"text below {MIN_PX} px at the column's width (< {limit:.2f} pt): {small[:5]}")


def drawn_texts(fig):
    """The texts of fig that are drawn: visible, not empty, and not the label of a tick that
    its axes do not show (an axes turned off, or a tick outside its view limits)."""
    hidden = set()
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            slack = 1e-9 * (abs(lo) + abs(hi) + 1)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not ax.axison or not lo - slack <= tick.get_loc() <= hi + slack:
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [t for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def check_placement(fig, slack_px=1.0, overlap_px=3.0):
    """Raise if a drawn text runs past the figure's edge (it would be cut off) or overlaps
    another drawn text by more than overlap_px both ways (a collision: stacked lines of one
    paragraph touch by a pixel or so, their boxes' descent). Draws the figure once."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    boxes = [(t.get_window_extent(renderer), t.get_text()) for t in drawn_texts(fig)]
    outside = [text for box, text in boxes if box.x0 < -slack_px or box.y0 < -slack_px
               or box.x1 > width + slack_px or box.y1 > height + slack_px]
    if outside:
        raise ValueError(f"text past the figure's edge, cut off: {outside[:5]}")
    for i, (a, text_a) in enumerate(boxes):
        for b, text_b in boxes[i + 1:]:
            if (min(a.x1, b.x1) - max(a.x0, b.x0) > overlap_px
                    and min(a.y1, b.y1) - max(a.y0, b.y0) > overlap_px):
                raise ValueError(f"two texts overlap: {text_a!r} and {text_b!r}")
            same_line = min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5 * min(a.height, b.height)
            if same_line and max(a.x0, b.x0) - min(a.x1, b.x1) < 1.5:
                raise ValueError(f"two texts on one line run into each other: {text_a!r} and {text_b!r}")


def save(fig, path):
    check_legible(fig)
    fig.savefig(path, format=path.rsplit(".", 1)[-1], transparent=True, metadata={"Date": None}
                if path.endswith(".svg") else None)
    plt.close(fig)


def bare_axes(fig, rect, xlim, ylim, equal=False):
    """Axes without frame or ticks, in data coordinates (y grows downward)."""
    ax = fig.add_axes(rect)
    ax.set_xlim(*xlim)
    ax.set_ylim(ylim[1], ylim[0])
    ax.set_axis_off()
    if equal:
        ax.set_aspect("equal")
    return ax


def cell(ax, x, y, w=1.0, h=1.0, fc="white", ec=GRID, lw=0.6, z=1, **kw):
    r = Rectangle((x, y), w, h, facecolor=fc, edgecolor=ec, linewidth=lw, zorder=z, **kw)
    ax.add_patch(r)
    return r

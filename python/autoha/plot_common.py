"""What both pictures share: a matplotlib Figure made without pyplot (no display needed), sizes
written as 1K/1M, and the caption that says a picture was drawn from sim/.
"""
from autoha._optional import need
from autoha.report_io import is_simulated

SIM_TEXT = "simulated (sim/)"


def figure(width, height):
    """Returns a matplotlib Figure with constrained layout, attached to the Agg canvas, so labels
    are laid out inside the figure and saving needs no GUI. Raises MissingDependency."""
    need("matplotlib", "python -m autoha plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def size_text(n):
    """Returns bytes `n` in the reports' short form: 512, 1K, 16M, 2G."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def title(fig, text, reports):
    """Sets the figure's title to `text`, with a second line saying the figures are simulated when
    any report drawn is from sim/ (all of them, or `N of M reports`).

    Note that the caption is part of the suptitle, so constrained layout keeps it inside the figure.
    """
    sim = sum(1 for r in reports if is_simulated(r))
    if sim == len(reports) and sim:
        text += f"\n{SIM_TEXT}: times from sim/'s model, not measured on hardware"
    elif sim:
        text += f"\npartly {SIM_TEXT}: {sim} of {len(reports)} reports are from sim/'s model"
    fig.suptitle(text)

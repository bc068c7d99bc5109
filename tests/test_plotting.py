"""The one plotting set-up: Agg selected, PNGs written atomically and figures closed."""

import matplotlib
import pytest

from commgraph.plotting import pyplot, save_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pyplot_selects_agg():
    plt = pyplot()
    assert matplotlib.get_backend().lower() == "agg"
    assert plt is __import__("matplotlib.pyplot").pyplot


def test_save_png_writes_a_png_and_closes_the_figure(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_png(fig, tmp_path / "deep" / "line.png")
    assert (tmp_path / "deep" / "line.png").read_bytes()[:8] == PNG_MAGIC
    assert fig.number not in plt.get_fignums()


def test_save_png_leaves_nothing_when_drawing_fails(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, r"$\unknowncommand$")  # mathtext fails when the figure is rendered
    with pytest.raises(ValueError):
        save_png(fig, tmp_path / "broken.png")
    assert list(tmp_path.iterdir()) == []
    plt.close(fig)

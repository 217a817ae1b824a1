"""Every figure, drawn once for the whole test session: test_figures.py checks all of them,
and each chapter's test file reads back its own."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import figures  # noqa: E402
import style  # noqa: E402


@pytest.fixture(scope="session")
def all_drawn():
    out = {name: draw() for name, draw in figures.FIGURES.items()}
    yield out
    for fig, _ in out.values():
        style.plt.close(fig)

"""Rounding to storage formats (fp8 e4m3 is tested in test_fp8.py)."""

import numpy as np
import pytest

from pa_ref import round_to


def test_round_to_gives_nearest_representable():
    x = np.array([1.0 + 2**-12, 1.0 + 2**-10, 1.0 + 2**-8, 1 / 3])
    np.testing.assert_array_equal(round_to(x, "fp16"), [1.0, 1.0 + 2**-10, 1.0 + 2**-8, 0.333251953125])
    np.testing.assert_array_equal(round_to(x, "bf16"), [1.0, 1.0, 1.0, 0.333984375])
    assert round_to(x, "fp32")[3] == np.float32(1 / 3)
    assert round_to(x, "fp16").dtype == np.float64


def test_round_to_rejects_unknown_names():
    with pytest.raises(ValueError):
        round_to(1.0, "fp8")

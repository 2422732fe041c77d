"""The shared argument checks (isingattn._validation): one message shape for every parameter."""

import numpy as np
import pytest

from isingattn._validation import check_choice, check_positive_int


def test_check_choice_returns_valid_values_and_names_the_rest():
    assert check_choice("mode", "a", ("a", "b")) == "a"
    assert check_choice("order", 2, (1, 2)) == 2
    for bad, shown in [("c", "'c'"), (None, "None"), ([1], r"\[1\]"), (True, "True"),
                       (np.arange(2), r"array\(\[0, 1\]\)")]:
        with pytest.raises(ValueError, match=f"^mode must be one of 'a', 1; got {shown}$"):
            check_choice("mode", bad, ("a", 1))


def test_check_positive_int():
    assert check_positive_int("n", np.int64(3)) == 3
    with pytest.raises(ValueError, match="n must be an integer >= 1; got 0"):
        check_positive_int("n", 0)
    with pytest.raises(TypeError, match="n must be an integer >= 1; got 2.0"):
        check_positive_int("n", 2.0)

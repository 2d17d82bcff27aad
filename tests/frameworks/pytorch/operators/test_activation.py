"""The PyTorch activation converters against the reference operators: Shrink, Swish and SwiGLU (forward and
gradient), their narrow-float paths (computed in float32 as the reference), and the errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

# (id, op_type, attributes, [input makers], options)
CASES = [
    ("shrink_default", "Shrink", {}, [_rand(3, 4, low=-2, high=2)], {}),
    ("shrink_soft", "Shrink", {"bias": 1.5, "lambd": 1.5}, [_rand(3, 4, low=-3, high=3)], {}),
    ("shrink_hard", "Shrink", {"lambd": 1.5}, [_ints([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)], {}),
    ("shrink_int8", "Shrink", {"bias": 1.5, "lambd": 1.0}, [_ints([-5, -1, 0, 1, 2, 5], np.int8)], {}),
    ("shrink_float64", "Shrink", {"bias": 0.25, "lambd": 0.5}, [lambda rng: rng.uniform(-2, 2, (2, 5))], {}),
    ("swish", "Swish", {}, [_rand(3, 4, low=-4, high=4)], {}),
    ("swish_alpha", "Swish", {"alpha": 0.5}, [_rand(3, 4, low=-4, high=4)], {}),
    ("swish_float64", "Swish", {"alpha": 2.0}, [lambda rng: rng.uniform(-4, 4, (2, 3))], {}),
    ("swiglu", "SwiGLU", {}, [_rand(2, 4, low=-3, high=3), _rand(2, 4, low=-3, high=3)], {}),
    ("swiglu_alpha", "SwiGLU", {"alpha": 0.5}, [_rand(2, 3, 4, low=-3, high=3), _rand(2, 3, 4)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


@pytest.mark.parametrize("op_type, attributes, count", [("Swish", {}, 1), ("Swish", {"alpha": 0.7}, 1),
                                                         ("SwiGLU", {}, 2), ("SwiGLU", {"alpha": 1.5}, 2)])
def test_float16_computed_in_float32_as_the_reference(op_type, attributes, count):
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-4, 4, (3, 5)).astype(np.float16) for _ in range(count)]
    got = create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in arrays])
    expected = reference_op(op_type, attributes).forward(arrays)
    assert got.dtype == torch.float16
    # One float32 sigmoid against another, rounded to float16: at most one float16 step apart.
    np.testing.assert_allclose(got.numpy().astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_swiglu_needs_two_inputs_of_one_shape():
    a, b = np.ones((2, 4), np.float32), np.ones((2, 1), np.float32)
    for run in (lambda: reference_op("SwiGLU", {}).forward([a, b]),
                lambda: create_operator("SwiGLU", {})(torch.from_numpy(a), torch.from_numpy(b))):
        with pytest.raises(ShapeError, match="A and B must have the same shape"):
            run()
    with pytest.raises(ShapeError, match="expected inputs"):
        create_operator("SwiGLU", {})(torch.from_numpy(a))

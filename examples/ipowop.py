"""The seeds' Python custom operator ``IPowOp`` (Ben-Nun et al., "A Modular Benchmarking Infrastructure for
High-Performance and Reproducible Deep Learning", "For Customizing: New Operator"), as written there with only
the base class's import added: ``y = x ** power`` and its gradient, in NumPy.

Validate it and run it in any framework::

    python examples/ipowop.py

>>> import numpy as np
>>> IPowOp(3).forward([np.array([2.0])])
array([8.])
"""
from __future__ import annotations

from d5.ops import CustomPythonOp


class IPowOp(CustomPythonOp):
    def __init__(self, power):
        super(IPowOp, self).__init__()
        self.power = power
        assert int(power) == power  # integral

    def forward(self, inputs):
        return inputs[0] ** self.power

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0] * self.power *
                (fwd_inputs[0] ** (self.power - 1)))


def main() -> None:
    """Validate IPowOp's forward against NumPy and its gradient by finite differences on every installed
    framework."""
    import numpy as np

    import d5
    from d5.ops import test_forward, test_gradient

    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 5))
    for name in d5.frameworks.available():
        framework = d5.frameworks.load(name)
        op = framework.custom_op(IPowOp(3))
        print(name, test_forward(IPowOp(3), [x], lambda inputs: inputs[0] ** 3), test_gradient(IPowOp(3), [x]), op)


if __name__ == "__main__":
    main()

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


def cubic_regression(op, seed=0):
    """A network holding ``op`` as a custom node -- x -> MatMul(w) -> op -> mean squared error against
    t = (x @ w_true) ** 3 -- and a batch for it. Returns ``(network, batch)``."""
    import numpy as np

    import d5

    rng = np.random.default_rng(seed)
    net = d5.Network("cubic")
    net.add_input("x", ("N", 3))
    net.add_input("t", ("N", 2))
    net.add_param("w", rng.uniform(-1, 1, (3, 2)).astype(np.float32))
    net.add_node("MatMul", ["x", "w"], ["h"])
    net.add_custom_node(op, ["h"], ["y"])
    net.add_node("Sub", ["y", "t"], ["e"])
    net.add_node("Mul", ["e", "e"], ["e2"])
    net.add_node("ReduceMean", ["e2"], ["loss"], keepdims=0)
    net.add_output("loss")
    x = rng.uniform(-1, 1, (16, 3)).astype(np.float32)
    return net, {"x": x, "t": (x @ rng.uniform(-1, 1, (3, 2)).astype(np.float32)) ** 3}


def main() -> None:
    """Validate the Python IPowOp and the C++ ipowop (examples/ipowop.cpp) on every installed framework: forward
    against NumPy, gradient by finite differences, then a few training steps of a network holding each."""
    from pathlib import Path

    import numpy as np

    import d5
    from d5.ops import compile_cpp_op, test_forward, test_gradient

    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 5))
    cpp = compile_cpp_op(Path(__file__).with_name("ipowop.cpp"), "ipowop", defines={"DPOWER": 3})
    for op in (IPowOp(3), cpp):
        print(f"{op.op_type if op is cpp else 'IPowOp'}: {test_forward(op, [x], lambda inputs: inputs[0] ** 3)}")
        print(f"  {test_gradient(op, [x])}")
    for name in d5.frameworks.available():
        for label, op in (("Python IPowOp", IPowOp(3)), ("C++ ipowop", cpp.with_attributes())):
            net, batch = cubic_regression(op)
            optimizer = d5.GradientDescent(d5.frameworks.get(name).from_model(net), 0.05)
            losses = [float(optimizer.step(batch)["loss"]) for _ in range(30)]
            print(f"{name:>10} {label:<14} loss {losses[0]:.4f} -> {losses[-1]:.4f} in 30 steps")


if __name__ == "__main__":
    main()

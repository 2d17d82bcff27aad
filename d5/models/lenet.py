"""LeNet-5 (LeCun et al. 1998) in its modern form: ReLU and max pooling, as in the seeds' CNN experiment."""
from __future__ import annotations

from d5.models.builder import NetworkBuilder
from d5.network.graph import Network


def lenet5(num_classes: int = 10, input_shape: tuple[int, int, int] = (1, 28, 28), seed: int = 0) -> Network:
    """LeNet-5 as a d5.Network with a symbolic batch dimension: conv(6, 5x5, pad 2) - pool - conv(16, 5x5) -
    pool - fc 120 - fc 84 - fc ``num_classes``. Inputs ``input`` (N, 1, 28, 28) float32 and ``label`` (N,)
    int64; outputs ``output`` (logits) and ``loss`` (mean softmax cross-entropy). 61,706 parameters.

    >>> import d5
    >>> net = d5.models.lenet5()
    >>> sum(net.params[p].size for p in net.get_params())
    61706
    """
    b = NetworkBuilder("lenet5", input_shape, num_classes, seed=seed)
    x = b.max_pool(b.relu(b.conv(b.input, 6, kernel=5, pad=2)), 2)
    x = b.max_pool(b.relu(b.conv(x, 16, kernel=5)), 2)
    x = b.relu(b.linear(b.flatten(x), 120))
    x = b.relu(b.linear(x, 84))
    return b.classifier(b.linear(x, num_classes, output="output"))

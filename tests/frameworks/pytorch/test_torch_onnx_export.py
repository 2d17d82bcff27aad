"""``torch.onnx.export`` with its defaults (the dynamo exporter, which needs onnxscript: the ``torch`` extra
installs it) writes a file that d5 imports and runs like torch, on PyTorch and on the reference framework."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks import pytorch, reference  # noqa: E402


class SmallNet(torch.nn.Module):
    """A convolution, a linear layer and a softmax: the operators of a typical exported classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, kernel_size=3)
        self.fc = torch.nn.Linear(2 * 3 * 3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(torch.relu(self.conv(x)).flatten(1)), dim=-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(path of the exported file, the input, torch's output)."""
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(2, 1, 5, 5)
    path = tmp_path_factory.mktemp("export") / "m.onnx"
    # Nothing but the defaults: a missing onnxscript fails here with "No module named 'onnxscript'".
    torch.onnx.export(model, (x,), str(path))
    with torch.no_grad():
        expected = model(x).numpy()
    return path, x.numpy(), expected


@pytest.mark.parametrize("framework", [pytorch, reference], ids=["pytorch", "reference"])
def test_a_default_torch_onnx_export_runs_in_d5_like_in_torch(exported, framework):
    path, x, expected = exported
    executor = framework.from_onnx(path)
    (input_name,) = executor.network.inputs
    (output_name,) = executor.network.outputs
    got = executor.inference({input_name: x})[output_name]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

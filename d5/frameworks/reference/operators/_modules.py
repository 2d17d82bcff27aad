"""Imports every module that registers reference operators (see registry._load_all)."""
from d5.frameworks.reference.operators import (  # noqa: F401
    activations,
    conv,
    conv_transpose,
    einsum,
    elementwise,
    layer_norm,
    linear,
    losses,
    math_ops,
    normalization,
    pooling,
    recurrent,
    reductions,
    shape_ops,
    tensor_ops,
)
from d5.frameworks.reference.operators import image_ops, misc_ops  # noqa: F401,E402
from d5.frameworks.reference.operators import attention, rms_rotary  # noqa: F401,E402
from d5.frameworks.reference.operators import integer_ops, quantization  # noqa: F401,E402
from d5.frameworks.reference.operators import signal_roi_ops, string_ops  # noqa: F401,E402
from d5.frameworks.reference.operators import sequence_ops  # noqa: F401,E402
from d5.frameworks.reference.operators import control_flow  # noqa: F401,E402
from d5.frameworks.reference.operators import cnn_norm_ops  # noqa: F401,E402

"""Framework-neutral checks and plans of the attention, signal, recurrent and image operators.

Every framework (torch, TensorFlow, MXNet, and the NumPy reference where it checks the same) converts these ONNX
operators with the same argument checks, error messages and shape or geometry plans; they live here once, in plain
Python and NumPy, and the converters keep only the computation on their own tensors. Shapes are passed as tuples
(or the framework's shape object where a message shows it as the framework always did); nothing here imports a
deep-learning framework.

>>> attention_geometry((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6))
AttentionGeometry(batch=2, q_heads=4, q_len=3, head_size=8, kv_heads=2, kv_len=5)
>>> dft_points(None, 8, inverse=True, onesided=True)
14
>>> check_hidden_size("GRU", 3, (1, 6, 2))
Traceback (most recent call last):
  ...
d5.errors.ShapeError: GRU: hidden_size=3 disagrees with R of shape (1, 6, 2)
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops.onnx_attributes import RECURRENT_DEFAULT_ACTIVATIONS
from d5.ops.onnx_semantics import broadcast_shape, normalize_axes, normalized_grid_positions, resize_plan, resize_taps


# ------------------------------------------------------------------------------------------------ common

def single_value_present(op_name: str, what: str, count: int, shape: Any) -> bool:
    """Whether an optional one-value input that is given holds its value: False when it is empty (ONNX's way of
    leaving an optional input out), True for one element; a ShapeError (showing ``shape``) for more.

    >>> single_value_present("STFT", "input 'frame_step'", 0, (0,)), single_value_present("STFT", "x", 1, ())
    (False, True)
    """
    if count == 0:
        return False
    if count != 1:
        raise ShapeError(f"{op_name}: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                         f"{shape}")
    return True


def check_at_least_1d(op_name: str, what: str, rank: int | None, shape: Any) -> None:
    """A ShapeError unless the input ``what`` has a known rank of at least 1 (``shape`` is shown as given)."""
    if rank is None or rank < 1:
        raise ShapeError(f"{op_name}: {what} must have at least 1 dimension, got shape {shape}")


def output_datatype_error(op_name: str, value: Any, unknown: str = "is not an ONNX data type",
                          examples: str = "1 (float) or 11 (double)") -> ShapeError:
    """The error for an ``output_datatype`` attribute naming no data type the framework holds (``unknown`` says
    why, ``examples`` which values to use instead)."""
    return ShapeError(f"{op_name}: output_datatype {value} {unknown}; use a TensorProto.DataType value such as "
                      f"{examples}")


# --------------------------------------------------------------------------------------------- Attention

#: qk_matmul_output_mode values: what Attention's fourth output holds.
QK_RAW, QK_SOFTCAPPED, QK_WITH_BIAS, QK_SOFTMAX = 0, 1, 2, 3


class AttentionGeometry(NamedTuple):
    """The sizes of one Attention node (heads split, past keys included)."""

    batch: int
    q_heads: int
    q_len: int
    head_size: int
    kv_heads: int
    kv_len: int


def check_attention_inputs(q: Any, k: Any, v: Any, past_key: Any, past_value: Any, nonpad_kv_seqlen: Any) -> None:
    """ShapeErrors for Attention's missing inputs: Q, K and V are required, past_key and past_value come together,
    and the external cache (nonpad_kv_seqlen) excludes the internal one (past_key/past_value)."""
    if q is None or k is None or v is None:
        raise ShapeError("Attention: inputs Q, K and V are required")
    if (past_key is None) != (past_value is None):
        raise ShapeError("Attention: past_key and past_value must be given together (or neither)")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ShapeError("Attention: nonpad_kv_seqlen (external KV cache) cannot be combined with past_key/"
                         "past_value (internal cache); use one of the two")


def check_attention_ranks(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int]) -> int:
    """The common rank (3 or 4) of Q, K and V; a ShapeError otherwise."""
    rank = len(q_shape)
    if not (rank == len(k_shape) == len(v_shape) and rank in (3, 4)):
        raise ShapeError(f"Attention: Q, K and V must all be 3-D or all 4-D, got shapes {q_shape}, {k_shape}, "
                         f"{v_shape}")
    return rank


def wide_softmax(softmax_precision: Any) -> bool:
    """Whether ``softmax_precision`` asks for float64 (TensorProto.DOUBLE, 11)."""
    return softmax_precision is not None and int(softmax_precision) == 11


def split_heads_shape(shape: Sequence[int], num_heads: int | None, name: str) -> tuple[int, int, int, int]:
    """(batch, seq, heads, head_size) of a 3-D (batch, seq, hidden) input ``name`` split into ``num_heads`` heads;
    a ShapeError without the head count or for a hidden size it does not divide.

    >>> split_heads_shape((2, 3, 8), 4, "Q")
    (2, 3, 4, 2)
    """
    if not num_heads:
        raise ShapeError(f"Attention: 3-D inputs need the q_num_heads and kv_num_heads attributes (to split "
                         f"the hidden size of {name} into heads)")
    batch, seq, hidden = shape
    if hidden % num_heads:
        raise ShapeError(f"Attention: the hidden size {hidden} of {name} is not divisible by {num_heads} heads")
    return batch, seq, num_heads, hidden // num_heads


def past_kv_length(past_key_shape: Sequence[int], past_value_shape: Sequence[int], k_shape: Sequence[int],
                   v_shape: Sequence[int]) -> int:
    """The length of the internal KV cache: past_key and past_value must be 4-D (batch, kv_heads, past_len,
    head_size) matching K and V (heads split); a ShapeError otherwise."""
    pk, pv, ks, vs = (tuple(shape) for shape in (past_key_shape, past_value_shape, k_shape, v_shape))
    if len(pk) != 4 or len(pv) != 4 or pk[:2] != ks[:2] or pv[:2] != vs[:2] or pk[3] != ks[3] or pv[3] != vs[3] \
            or pk[2] != pv[2]:
        raise ShapeError(f"Attention: past_key and past_value must be 4-D (batch, kv_heads, past_len, "
                         f"head_size) matching K {ks} and V {vs}, got {pk} and {pv}")
    return pk[2]


def check_head_groups(q_heads: int, kv_heads: int, v_heads: int) -> None:
    """A ShapeError unless the query heads group evenly over the key and value heads (grouped-query attention)."""
    if q_heads != kv_heads and (kv_heads == 0 or q_heads % kv_heads or v_heads != kv_heads):
        raise ShapeError(f"Attention: {q_heads} query heads cannot be grouped over {kv_heads} key and "
                         f"{v_heads} value heads (q_num_heads must be a multiple of kv_num_heads)")


def attention_geometry(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int]) -> AttentionGeometry:
    """The sizes of 4-D Q, K and V (heads split, past keys concatenated); ShapeErrors where the heads do not group
    or K and V disagree with Q on batch, key length or head size."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    batch, q_heads, q_len, head_size = q_shape
    kv_heads, kv_len = k_shape[1], k_shape[2]
    check_head_groups(q_heads, kv_heads, v_shape[1])
    if k_shape[0] != batch or v_shape[0] != batch or v_shape[2] != kv_len or k_shape[3] != head_size:
        raise ShapeError(f"Attention: K {k_shape} and V {v_shape} (heads split) do not match Q {q_shape}: "
                         f"batch, key length and Q/K head size must agree")
    return AttentionGeometry(batch, q_heads, q_len, head_size, kv_heads, kv_len)


def attention_scale(scale: float | None, head_size: int) -> float:
    """The ``scale`` attribute, or its default ``1 / sqrt(head_size)``."""
    return scale if scale is not None else 1.0 / math.sqrt(head_size)


def check_attn_mask(shape: Sequence[int], kv_len: int, *, dtype_ok: bool, dtype_name: str) -> None:
    """ShapeErrors for an attn_mask that is not 1-D to 4-D, covers more keys than there are, or is neither bool
    nor float (``dtype_ok`` says whether it is; ``dtype_name`` names its dtype)."""
    if not 1 <= len(shape) <= 4:
        raise ShapeError(f"Attention: attn_mask must have 1 to 4 dimensions (broadcast to (batch, heads, "
                         f"q_len, kv_len)), got shape {tuple(shape)}")
    if shape[-1] > kv_len:
        raise ShapeError(f"Attention: attn_mask covers {shape[-1]} keys but there are only {kv_len}")
    if not dtype_ok:
        raise ShapeError(f"Attention: attn_mask must be bool or float, got {dtype_name}")


def check_nonpad_kv_seqlen(count: int, batch: int, shape: Any) -> None:
    """A ShapeError unless nonpad_kv_seqlen (of ``count`` elements, ``shape``) has one length per batch item."""
    if count != batch:
        raise ShapeError(f"Attention: nonpad_kv_seqlen must have one length per batch item ({batch}), got "
                         f"shape {shape}")


def uses_window(is_causal: Any, left_window_size: int, right_window_size: int) -> bool:
    """Whether causal or sliding-window masking applies."""
    return bool(is_causal or left_window_size >= 0 or right_window_size >= 0)


def window_conditions(distance: Any, is_causal: Any, left_window_size: int, right_window_size: int) -> list:
    """The conditions, on how far key j lies behind query i (``distance``: an array or tensor), under which a
    query may attend a key with causal and sliding-window masking; all must hold.

    >>> [c.tolist() for c in window_conditions(np.array([-1, 0, 3]), 1, 2, -1)]
    [[False, True, True], [True, True, False]]
    """
    conditions = []
    if is_causal:
        conditions.append(distance >= 0)
    if left_window_size >= 0:
        conditions.append(distance <= left_window_size)
    if right_window_size >= 0:
        conditions.append(-distance <= right_window_size)
    return conditions


def check_attention_bias(bias_shape: Sequence[int], scores_shape: tuple[int, ...]) -> None:
    """A ShapeError unless the combined bias (attn_mask with the causal and padding masks) broadcasts to the
    scores' shape without changing it."""
    try:
        fits = broadcast_shape("Attention", tuple(bias_shape), tuple(scores_shape)) == tuple(scores_shape)
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"Attention: attn_mask (with the causal and padding masks) of shape "
                         f"{tuple(bias_shape)} does not broadcast to the scores' shape {scores_shape}")


def qk_matmul_output(mode: int, raw: Any, softcapped: Any, biased: Any, probabilities: Any) -> Any:
    """What Attention's fourth output holds for ``qk_matmul_output_mode``."""
    return {QK_RAW: raw, QK_SOFTCAPPED: softcapped, QK_WITH_BIAS: biased, QK_SOFTMAX: probabilities}[mode]


# -------------------------------------------------------------------------------------- RotaryEmbedding

def check_rotary_inputs(inputs: Sequence[Any]) -> None:
    """A ShapeError unless the inputs X, cos_cache and sin_cache are given."""
    if len(inputs) < 3 or any(a is None for a in inputs[:3]):
        raise ShapeError("RotaryEmbedding: expected inputs (X, cos_cache, sin_cache[, position_ids])")


def rotary_heads(shape: Sequence[int], num_heads: int) -> tuple[int, int]:
    """(heads, head_size) of X: (batch, heads, seq, head_size), or (batch, seq, hidden) split into ``num_heads``;
    a ShapeError for other ranks or a head count not dividing the hidden size.

    >>> rotary_heads((2, 5, 12), 3), rotary_heads((2, 4, 5, 6), 0)
    ((3, 4), (4, 6))
    """
    if len(shape) == 4:
        return shape[1], shape[3]
    if len(shape) == 3:
        if num_heads <= 0 or shape[2] % num_heads:
            raise ShapeError(f"RotaryEmbedding: 3-D input {tuple(shape)} needs num_heads dividing its hidden size "
                             f"{shape[2]}, got num_heads={num_heads}")
        return num_heads, shape[2] // num_heads
    raise ShapeError(f"RotaryEmbedding: X must be 3-D or 4-D, got shape {tuple(shape)}")


def rotary_dim(rotary_embedding_dim: int, head_size: int) -> int:
    """The number of rotated features per head (``rotary_embedding_dim``, all when 0); a ShapeError unless it is
    even and at most the head size."""
    dim = rotary_embedding_dim or head_size
    if dim % 2 or dim > head_size:
        raise ShapeError(f"RotaryEmbedding: rotary_embedding_dim={dim} must be even and at most the head "
                         f"size {head_size}")
    return dim


def check_rotary_position_ids(cos_shape: Sequence[int], sin_shape: Sequence[int], ids_shape: Sequence[int],
                              lead: tuple[int, int], *, integer: bool, dtype_name: str) -> None:
    """A ShapeError unless, with position_ids, the caches are 2-D alike and position_ids integers (``integer``;
    ``dtype_name`` names their dtype) of shape ``lead`` (batch, seq)."""
    cos_shape, sin_shape, ids_shape = tuple(cos_shape), tuple(sin_shape), tuple(ids_shape)
    if len(cos_shape) != 2 or sin_shape != cos_shape or ids_shape != tuple(lead) or not integer:
        raise ShapeError(f"RotaryEmbedding: with position_ids, the caches must be 2-D (max_position, "
                         f"rotary_dim / 2) and position_ids integers of shape {tuple(lead)} (batch, seq); got "
                         f"caches {cos_shape} and {sin_shape}, position_ids {dtype_name} {ids_shape}")


def check_rotary_position_range(positions: Any, size: int, max_position: int) -> None:
    """A ShapeError unless the ``size`` position_ids ``positions`` (anything with ``min``/``max``) index the
    caches' ``max_position`` rows."""
    if size and (int(positions.min()) < 0 or int(positions.max()) >= max_position):
        raise ShapeError(f"RotaryEmbedding: position_ids must lie in [0, {max_position}) (the caches' "
                         f"max_position), got values in [{int(positions.min())}, {int(positions.max())}]")


def check_rotary_caches(cos_shape: Sequence[int], sin_shape: Sequence[int], lead: tuple[int, int], dim: int) -> None:
    """ShapeErrors unless the (gathered) caches are (batch, seq, rotary_dim / 2) alike, ``lead`` = (batch, seq)."""
    cos_shape, sin_shape, lead = tuple(cos_shape), tuple(sin_shape), tuple(lead)
    if len(cos_shape) != 3 or cos_shape != sin_shape or cos_shape[:2] != lead:
        raise ShapeError(f"RotaryEmbedding: cos/sin caches must be (batch, seq, rotary_dim / 2) = "
                         f"{lead + (dim // 2,)} without position_ids, got {cos_shape} and {sin_shape}")
    if cos_shape[-1] != dim // 2:
        raise ShapeError(f"RotaryEmbedding: cos/sin caches must end in rotary_embedding_dim / 2 = {dim // 2}, "
                         f"got {cos_shape} and {sin_shape}")


# ------------------------------------------------------------------------------------------------ signal

#: MelWeightMatrix's inputs, in order.
MEL_INPUT_NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def check_dft_input(shape: Sequence[int]) -> None:
    """A ShapeError unless the signal is ``[..., 1]`` (real) or ``[..., 2]`` (complex)."""
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise ShapeError(f"DFT: input must be [..., 1] (real) or [..., 2] (complex), got shape {tuple(shape)}")


def dft_axis(given: Any, attribute: int | None, rank: int) -> int:
    """DFT's signal axis in ``[0, rank - 2]``: the axis input ``given`` (None when absent), else the opset-17
    attribute, else -2; a ShapeError for the last (real/imaginary) axis or one outside the input.

    >>> dft_axis(None, None, 3), dft_axis(1, None, 4)
    (1, 1)
    """
    axis = int(given) if given is not None else (-2 if attribute is None else int(attribute))
    if not -rank <= axis <= rank - 2 or axis == -1:
        raise ShapeError(f"DFT: axis {axis} must be a signal axis of the rank-{rank} input: "
                         f"[{-rank}, -2] or [0, {rank - 2}]")
    return axis % rank


def dft_points(given: Any, size: int, *, inverse: Any, onesided: Any) -> int:
    """The transform length: ``dft_length`` ``given`` (None when absent), else the axis' ``size`` (an inverse
    onesided transform of a half spectrum: ``2 * (size - 1)``); a ShapeError below 1."""
    if given is not None:
        n = int(given)
    else:
        n = 2 * (size - 1) if inverse and onesided else size
    if n < 1:
        raise ShapeError(f"DFT: dft_length must be >= 1, got {n}")
    return n


def check_stft_signal(shape: Sequence[int]) -> None:
    """A ShapeError unless the STFT signal is [batch, length, 1] or [batch, length, 2]."""
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ShapeError(f"STFT: signal must be [batch, length, 1] (real) or [batch, length, 2] (complex), got "
                         f"shape {tuple(shape)}")


def stft_frames(length: int, step: Any, frame: Any, window_shape: Sequence[int] | None) -> tuple[int, int]:
    """(frame_length, frame_step) of an STFT of a signal of ``length`` samples: the frame_length input ``frame``,
    else the window's length (``window_shape``; None without a window), else the signal's; ShapeErrors for a window
    that is not 1-D of frame_length values, a step below 1 or a frame longer than the signal.

    >>> stft_frames(8, 4, None, (4,)), stft_frames(8, 2, None, None)
    ((4, 4), (8, 2))
    """
    if window_shape is not None and (len(window_shape) != 1 or (frame is not None and window_shape[0] != frame)):
        raise ShapeError(f"STFT: window must be 1-D with frame_length ({frame}) values, got shape "
                         f"{tuple(window_shape)}")
    if frame is None:
        frame = length if window_shape is None else window_shape[0]
    frame = int(frame)
    if step is None or int(step) < 1 or not 1 <= frame <= length:
        raise ShapeError(f"STFT: frame_step must be >= 1 and frame_length in [1, {length}] (the signal "
                         f"length), got frame_step {step} and frame_length {frame}")
    return frame, int(step)


def cosine_window_size(op_name: str, size: Any, periodic: Any) -> tuple[int, int]:
    """(size, period N) of a cosine-sum window: ``N = size`` when ``periodic``, else ``size - 1``; a ShapeError
    unless the size is a non-negative integer.

    >>> cosine_window_size("HannWindow", 4, 1), cosine_window_size("HannWindow", 4.0, 0)
    ((4, 4), (4, 3))
    """
    if size is None or int(size) != size or size < 0:
        raise ShapeError(f"{op_name}: size must be a non-negative integer scalar, got {size}")
    count = int(size)
    return count, count if periodic else count - 1


def check_mel_inputs(count: int) -> None:
    """A ShapeError unless MelWeightMatrix has its ``count`` = 5 inputs."""
    if count != 5:
        raise ShapeError(f"MelWeightMatrix: expected the 5 inputs {', '.join(MEL_INPUT_NAMES)}, got {count}")


# --------------------------------------------------------------------------------------------- recurrent

#: Gate blocks per recurrent op, in ONNX's order (LSTM i, o, f, c; GRU z, r, h; RNN one).
RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class RecurrentSpec:
    """Mixin of the recurrent converters (LSTM, GRU, RNN): their class's ``op_name`` fixes the number of gate
    blocks, whether there is a cell state (Y_c) and the default activations of a direction.

    >>> class GRU(RecurrentSpec):
    ...     op_name = "GRU"
    >>> GRU().gates, GRU().has_cell_state, GRU().default_activations
    (3, False, ('Sigmoid', 'Tanh'))
    """

    op_name = ""

    @property
    def gates(self) -> int:
        return RECURRENT_GATES[self.op_name]

    @property
    def has_cell_state(self) -> bool:
        return self.op_name == "LSTM"

    @property
    def default_activations(self) -> tuple[str, ...]:
        return RECURRENT_DEFAULT_ACTIVATIONS[self.op_name]


def check_recurrent_inputs(op_name: str, x: Any, w: Any, r: Any) -> None:
    """A ShapeError unless the inputs X, W and R are given."""
    if x is None or w is None or r is None:
        raise ShapeError(f"{op_name}: inputs X, W and R are required")


def check_recurrent_ranks(op_name: str, x_shape: Any, w_shape: Any, r_shape: Any) -> None:
    """A ShapeError unless X, W and R are 3-D (the shapes are shown as given)."""
    if len(x_shape) != 3 or len(w_shape) != 3 or len(r_shape) != 3:
        raise ShapeError(f"{op_name}: X, W and R must be 3-D, got X {x_shape}, W {w_shape}, R {r_shape}")


def check_hidden_size(op_name: str, hidden_size: int | None, r_shape: Any) -> int:
    """The hidden size (R's last axis); a ShapeError where the ``hidden_size`` attribute disagrees."""
    hidden = r_shape[-1]
    if hidden_size is not None and hidden_size != hidden:
        raise ShapeError(f"{op_name}: hidden_size={hidden_size} disagrees with R of shape {tuple(r_shape)}")
    return hidden


def check_recurrent_weights(op_name: str, *, direction: str, dirs: int, gates: int, hidden: int,
                            x_shape: Sequence[int], w_shape: Sequence[int], r_shape: Sequence[int]) -> None:
    """A ShapeError unless W is (dirs, gates * hidden, features) and R (dirs, gates * hidden, hidden) for X of
    ``x_shape`` (seq, batch, features: layout 0)."""
    features = x_shape[2]
    if tuple(w_shape) != (dirs, gates * hidden, features) or tuple(r_shape) != (dirs, gates * hidden, hidden):
        raise ShapeError(f"{op_name}: with direction={direction} and X {tuple(x_shape)} expected W "
                         f"{(dirs, gates * hidden, features)} and R {(dirs, gates * hidden, hidden)}; got W "
                         f"{tuple(w_shape)}, R {tuple(r_shape)}")


def recurrent_state_shape(dirs: int, batch: int, hidden: int, layout: int) -> tuple[int, int, int]:
    """The shape of initial_h / initial_c (and Y_h / Y_c) in ``layout``."""
    return (batch, dirs, hidden) if layout else (dirs, batch, hidden)


def check_recurrent_optional(op_name: str, *, dirs: int, gates: int, hidden: int, state: tuple[int, int, int],
                             b: Any, initial_h: Any, initial_c: Any, p: Any, note: str = "") -> None:
    """ShapeErrors for the optional inputs given (their shapes; None when absent) that do not have their shapes:
    B (dirs, 2 * gates * hidden), initial_h and initial_c ``state``, P (dirs, 3 * hidden); ``note`` follows the
    expected shape in the message."""
    for label, given, shape in (("B", b, (dirs, 2 * gates * hidden)), ("initial_h", initial_h, state),
                                ("initial_c", initial_c, state), ("P", p, (dirs, 3 * hidden))):
        if given is not None and tuple(given) != shape:
            raise ShapeError(f"{op_name}: {label} must have shape {shape}{note}, got {tuple(given)}")


def check_sequence_lens_count(op_name: str, count: int, batch: int, shape: Any) -> None:
    """A ShapeError unless sequence_lens (of ``count`` elements, ``shape``) holds one length per batch item."""
    if count != batch:
        raise ShapeError(f"{op_name}: sequence_lens must hold {batch} lengths (one per batch item), got "
                         f"shape {shape}")


def sequence_lengths(op_name: str, values: Any, batch: int, seq: int) -> np.ndarray | None:
    """sequence_lens as (batch,) int64 lengths, or None where every sequence is whole; a ShapeError unless there
    are ``batch`` of them in ``[0, seq]``.

    >>> sequence_lengths("RNN", [3, 3], 2, 3) is None, sequence_lengths("RNN", [3, 1], 2, 3).tolist()
    (True, [3, 1])
    """
    lens = np.asarray(values).astype(np.int64).reshape(-1)
    if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
        raise ShapeError(f"{op_name}: sequence_lens must be {batch} integers in [0, {seq}], got {lens.tolist()}")
    return None if (lens == seq).all() else lens


def check_recurrent_attributes(op_name: str, attributes: Any, by: str = "") -> None:
    """An UnsupportedOperatorError for the recurrent attributes (``attributes``: the node's, resolved) d5 does not
    implement: LSTM's coupled input and forget gates (``input_forget=1``); ``by`` names who does not support them,
    if anyone in particular."""
    if op_name == "LSTM" and attributes.input_forget:
        raise UnsupportedOperatorError(f"LSTM: input_forget=1 (coupled input and forget gates) is not supported{by}; "
                                       "use input_forget=0")


def gate_blocks(values: Any, n: int, gates: int) -> list:
    """The ``gates`` column blocks of width ``n`` of ``values`` (..., gates * n) in ONNX's gate order (LSTM i, o,
    f, c; GRU z, r, h), by slicing (any array or tensor); the last block runs to the end.

    >>> [b.tolist() for b in gate_blocks(np.arange(6).reshape(1, 6), 2, 3)]
    [[[0, 1]], [[2, 3]], [[4, 5]]]
    """
    return [values[:, g * n:(g + 1) * n] if g < gates - 1 else values[:, g * n:] for g in range(gates)]


def peephole_blocks(p: Any, n: int) -> tuple[Any, Any, Any]:
    """LSTM's peephole weights of one direction (3 * n,) as (input, output, forget) blocks."""
    return p[:n], p[n:2 * n], p[2 * n:]


def lstm_cell(pre: Any, c: Any, p: Any, n: int, gate: Any, candidate: Any, output: Any) -> tuple[Any, Any]:
    """ONNX LSTM's cell on the step's pre-activations ``pre`` (batch, 4 n; gates i, o, f, c) and cell state ``c``,
    with peepholes ``p`` (3 n; None: none) and the activations ``gate`` (f), ``candidate`` (g) and ``output`` (h)
    as callables: ``(h_new, c_new)``. Works on any arrays or tensors with arithmetic and slicing.

    >>> h, c = lstm_cell(np.zeros((1, 4)), np.ones((1, 1)), None, 1, lambda a: a + 0.5, np.tanh, np.tanh)
    >>> round(float(h[0, 0]), 6), float(c[0, 0])      # c = 0.5 * 1 + 0.5 * tanh(0); h = 0.5 * tanh(c)
    (0.231059, 0.5)
    """
    a_i, a_o, a_f, a_c = gate_blocks(pre, n, 4)
    if p is not None:
        p_i, p_o, p_f = peephole_blocks(p, n)
        a_i, a_f = a_i + p_i * c, a_f + p_f * c
    i, f = gate(a_i), gate(a_f)
    c_new = f * c + i * candidate(a_c)
    if p is not None:
        a_o = a_o + p_o * c_new
    o = gate(a_o)
    return o * output(c_new), c_new


def gru_cell(xw: Any, h: Any, n: int, dense: Any, gate: Any, candidate: Any, linear_before_reset: Any) -> Any:
    """ONNX GRU's step: the new hidden state from the step's input projection ``xw`` (batch, 3 n; gates z, r, h)
    and ``h``, ``dense(v, start, stop)`` giving ``v R[start:stop]^T (+ Rb[start:stop])`` and the activations
    ``gate`` (f) and ``candidate`` (g) as callables. Works on any arrays or tensors with arithmetic and slicing."""
    x_z, x_r, x_h = gate_blocks(xw, n, 3)
    rzr = dense(h, 0, 2 * n)
    z = gate(x_z + rzr[:, :n])
    reset = gate(x_r + rzr[:, n:])
    if linear_before_reset:
        hidden = candidate(x_h + reset * dense(h, 2 * n, 3 * n))
    else:
        hidden = candidate(x_h + dense(reset * h, 2 * n, 3 * n))
    return (1.0 - z) * hidden + z * h


# ------------------------------------------------------------------------------------------------- image

def resize_inputs(rest: Sequence[Any]) -> tuple[tuple[Any, Any, Any], bool]:
    """Resize's inputs after X as (roi, scales, sizes) (None where absent) and whether they are opset 10's
    (X, scales), whose coordinates are asymmetric."""
    opset10 = len(rest) == 1
    given = (None, rest[0], None) if opset10 else (tuple(rest) + (None,) * 3)[:3]
    return given, opset10


def resize_host_value(known: Any) -> np.ndarray:
    """A known roi, scales or sizes input as float64 (floats) or int64 (integers), as the plan takes it."""
    known = np.asarray(known)
    return known.astype(np.float64 if known.dtype.kind in "fc" else np.int64)


def value_key(array: np.ndarray | None) -> tuple | None:
    """A hashable key of a small NumPy value (None stays None), for caching plans by value."""
    return None if array is None else (array.dtype.str, tuple(array.reshape(-1).tolist()))


def resize_coordinate_mode(node: Any, opset10: bool) -> str:
    """The coordinate transformation of a Resize node (opset 10's is always asymmetric)."""
    return "asymmetric" if opset10 else node.coordinate_mode


def resize_axis_taps(node: Any, in_len: int, out_len: int, scale: float, window: Any,
                     coordinate_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`d5.ops.onnx_semantics.resize_taps` of one axis with the interpolation attributes of the Resize
    operator ``node`` (mode, nearest_mode, cubic_a, exclude_outside, antialias, legacy_modes)."""
    return resize_taps("Resize", in_len=in_len, out_len=out_len, scale=scale, window=window, mode=node.mode,
                       coordinate_mode=coordinate_mode, nearest_mode=node.nearest_mode, cubic_a=node.cubic_a,
                       exclude_outside=node.exclude_outside, antialias=node.antialias, legacy=node.legacy_modes)


def resize_steps(node: Any, shape: Sequence[int], roi: Any, scales: Any, sizes: Any, opset10: bool) -> list:
    """Per resized ONNX axis of the Resize operator ``node``: (axis, index, weights, mask of the extrapolated
    output positions or None when there are none), applied in order."""
    coordinate_mode = resize_coordinate_mode(node, opset10)
    lengths = list(shape)
    steps = []
    for axis, scale, length, window in resize_plan("Resize", shape, roi, scales, sizes, node.axes, node.policy,
                                                   coordinate_mode):
        index, weights, outside = resize_axis_taps(node, lengths[axis], length, scale, window, coordinate_mode)
        lengths[axis] = length
        steps.append((axis, index, weights, outside if outside is not None and outside.any() else None))
    return steps


def check_grid_sample_shapes(shape: Sequence[int], grid_shape: Sequence[int]) -> None:
    """A ShapeError unless X is (N, C, *spatial) and grid (N, *output, spatial rank)."""
    if len(shape) < 3 or len(grid_shape) != len(shape) or grid_shape[-1] != len(shape) - 2 \
            or grid_shape[0] != shape[0]:
        raise ShapeError(f"GridSample: grid of shape {tuple(grid_shape)} does not match X of shape "
                         f"{tuple(shape)}; expected X (N, C, *spatial) and grid (N, *output, spatial rank)")


def row_major_strides(spatial: Sequence[int]) -> list[int]:
    """The element strides of the axes of a row-major array of shape ``spatial``.

    >>> row_major_strides((2, 3, 4))
    [12, 4, 1]
    """
    return [math.prod(spatial[axis + 1:]) for axis in range(len(spatial))]


def check_affine_grid(size: list[int], theta_shape: Any) -> int:
    """The spatial rank (2 or 3) of AffineGrid's output ``size`` (N, C, H, W) or (N, C, D, H, W); a ShapeError
    unless theta is (N, 2, 3) or (N, 3, 4) respectively and no size is negative."""
    ndim = len(size) - 2
    if ndim not in (2, 3) or tuple(theta_shape) != (size[0], ndim, ndim + 1) or min(size) < 0:
        raise ShapeError(f"AffineGrid: size must be (N, C, H, W) or (N, C, D, H, W) with theta of shape (N, 2, 3) "
                         f"or (N, 3, 4) respectively; got size {size} and theta of shape {tuple(theta_shape)}")
    return ndim


def affine_grid_base(spatial: Sequence[int], align_corners: Any) -> np.ndarray:
    """The (points, ndim + 1) homogeneous normalized coordinates ``(x, y[, z], 1)`` of AffineGrid's output points,
    in row-major order.

    >>> affine_grid_base((1, 2), 1).tolist()          # a 1 x 2 grid: y = 0, x = -1 and 1
    [[-1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    """
    mesh = np.meshgrid(*(normalized_grid_positions(n, align_corners) for n in spatial), indexing="ij")
    # The last coordinate axis is (x, y[, z]): the spatial axes in reverse order.
    columns = [axis.reshape(-1) for axis in reversed(mesh)] + [np.ones(mesh[0].size)]
    return np.stack(columns, axis=1)


def center_crop_pad_axes(axes: Sequence[int] | None, rank: int) -> list[int]:
    """CenterCropPad's axes: all by default, else ``axes`` normalized."""
    return list(range(rank)) if axes is None else normalize_axes("CenterCropPad", axes, rank)


class CropPad(NamedTuple):
    """Per axis: the kept ``(start, stop)`` (None: all of it) and the zeros added ``(before, after)``; and the
    output shape."""

    crops: list
    pads: list
    shape: tuple


def center_crop_pad_plan(shape: Sequence[int], target: list[int], axes: Sequence[int]) -> CropPad:
    """How CenterCropPad takes ``shape`` to ``target`` along ``axes``: center-cropped where it shrinks, zero-padded
    where it grows (an odd difference puts the extra element at the end); ShapeErrors for a target of another
    length than the axes or with negative sizes.

    >>> center_crop_pad_plan((5, 2), [3, 5], [0, 1])
    CropPad(crops=[(1, 4), None], pads=[(0, 0), (1, 2)], shape=(3, 5))
    """
    if len(target) != len(axes):
        raise ShapeError(f"CenterCropPad: shape {target} has {len(target)} entries for {len(axes)} axes")
    if min(target, default=0) < 0:
        raise ShapeError(f"CenterCropPad: the target shape must not have negative sizes, got {target}")
    crops: list = [None] * len(shape)
    pads = [(0, 0)] * len(shape)
    out = list(shape)
    for axis, size in zip(axes, target):
        have = shape[axis]
        out[axis] = size
        if size <= have:
            start = (have - size) // 2
            crops[axis] = (start, start + size)
        else:
            begin = (size - have) // 2
            pads[axis] = (begin, size - have - begin)
    return CropPad(crops, pads, tuple(out))


def check_roi_align_x(rank: int | None, shape: Any) -> None:
    """A ShapeError unless RoiAlign's X is 4-D (``shape`` is shown as given)."""
    if rank != 4:
        raise ShapeError(f"RoiAlign: X must be 4-D (N, C, H, W), got shape {shape}")


def check_roi_align_rois(rois_shape: Sequence[int], indices_shape: Sequence[int]) -> None:
    """A ShapeError unless rois is (num_rois, 4) and batch_indices (num_rois,)."""
    rois_shape, indices_shape = tuple(rois_shape), tuple(indices_shape)
    if len(rois_shape) != 2 or rois_shape[1] != 4 or indices_shape != (rois_shape[0],):
        raise ShapeError(f"RoiAlign: rois must be (num_rois, 4) and batch_indices (num_rois,), got "
                         f"{rois_shape} and {indices_shape}")


def check_roi_batch_indices(indices: Any, n: int) -> None:
    """A ShapeError unless every batch index (known values) names one of the ``n`` images."""
    indices = np.asarray(indices).reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ShapeError(f"RoiAlign: batch_indices must lie in [0, {n}), got {indices.tolist()}")


class RoiRegion(NamedTuple):
    """One RoiAlign region: its top-left corner, bin sizes and samples per bin along y and x."""

    x1: float
    y1: float
    bin_h: float
    bin_w: float
    grid_h: int
    grid_w: int


def roi_align_region(box: Sequence[float], node: Any) -> RoiRegion:
    """The region ``box`` ``[x1, y1, x2, y2]`` of the RoiAlign operator ``node`` (spatial_scale, half_pixel,
    output_height, output_width, sampling_ratio) as onnxruntime places it: scaled and shifted by -0.5 with
    ``half_pixel`` (else enlarged to at least 1x1), its bins, and ``sampling_ratio`` samples per bin (adaptive
    ``ceil(roi_size / output_size)`` when 0; 0 or less: no samples).

    >>> class Node: spatial_scale, half_pixel, output_height, output_width, sampling_ratio = 0.5, 0, 2, 2, 0
    >>> roi_align_region([0.0, 0.0, 8.0, 4.0], Node())
    RoiRegion(x1=0.0, y1=0.0, bin_h=1.0, bin_w=2.0, grid_h=1, grid_w=2)
    """
    offset = 0.5 if node.half_pixel else 0.0
    x1, y1, x2, y2 = (float(value) * node.spatial_scale - offset for value in box)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not node.half_pixel:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    ratio = node.sampling_ratio
    grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / node.output_height))
    grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / node.output_width))
    return RoiRegion(x1, y1, roi_h / node.output_height, roi_w / node.output_width, grid_h, grid_w)


def check_nms_shapes(boxes_shape: Sequence[int], scores_shape: Sequence[int]) -> None:
    """A ShapeError unless NonMaxSuppression's boxes are (B, N, 4) and scores (B, C, N)."""
    boxes_shape, scores_shape = tuple(boxes_shape), tuple(scores_shape)
    if len(boxes_shape) != 3 or boxes_shape[-1] != 4 or len(scores_shape) != 3 or \
            (scores_shape[0], scores_shape[2]) != (boxes_shape[0], boxes_shape[1]):
        raise ShapeError(f"NonMaxSuppression: boxes must be (B, N, 4) and scores (B, C, N), got {boxes_shape} and "
                         f"{scores_shape}")


def check_nms_dtypes(boxes_dtype: np.dtype, scores_dtype: np.dtype) -> None:
    """A ShapeError unless boxes and scores hold real numbers (NumPy dtypes)."""
    if boxes_dtype.kind not in "fiu" or scores_dtype.kind not in "fiu":
        raise ShapeError(f"NonMaxSuppression: boxes and scores must be float tensors, got {boxes_dtype} and "
                         f"{scores_dtype}")


def check_iou_threshold(limit: Any) -> None:
    """A ShapeError unless NonMaxSuppression's iou_threshold is in [0, 1]."""
    if not 0 <= limit <= 1:
        raise ShapeError(f"NonMaxSuppression: iou_threshold must be in [0, 1], got {limit}")


__all__ = [
    "AttentionGeometry", "CropPad", "MEL_INPUT_NAMES", "QK_RAW", "QK_SOFTCAPPED", "QK_SOFTMAX", "QK_WITH_BIAS",
    "RECURRENT_GATES", "RecurrentSpec", "RoiRegion", "affine_grid_base", "attention_geometry", "attention_scale",
    "center_crop_pad_axes", "center_crop_pad_plan", "check_affine_grid", "check_at_least_1d", "check_attention_bias",
    "check_attention_inputs", "check_attention_ranks", "check_attn_mask", "check_dft_input",
    "check_grid_sample_shapes", "check_head_groups", "check_hidden_size", "check_iou_threshold", "check_mel_inputs",
    "check_nms_dtypes", "check_nms_shapes", "check_nonpad_kv_seqlen", "check_recurrent_attributes",
    "check_recurrent_inputs", "check_recurrent_optional", "check_recurrent_ranks", "check_recurrent_weights",
    "check_roi_align_rois", "check_roi_align_x", "check_roi_batch_indices", "check_rotary_caches",
    "check_rotary_inputs", "check_rotary_position_ids", "check_rotary_position_range", "check_sequence_lens_count",
    "check_stft_signal", "cosine_window_size", "dft_axis", "dft_points", "gate_blocks", "gru_cell", "lstm_cell",
    "output_datatype_error", "past_kv_length", "peephole_blocks", "qk_matmul_output", "recurrent_state_shape",
    "resize_axis_taps", "resize_coordinate_mode", "resize_host_value", "resize_inputs", "resize_steps",
    "roi_align_region", "rotary_dim", "rotary_heads", "row_major_strides", "sequence_lengths", "single_value_present",
    "split_heads_shape", "stft_frames", "uses_window", "value_key", "wide_softmax", "window_conditions",
]

"""L3: gradient compression as composable pieces with one interface (after GRACE, Xu et al. 2021).

A :class:`Compressor` turns a tensor into a :class:`Payload` -- the contiguous arrays that go on the wire,
plus what every rank already knows (shape, dtype) -- and back. ``payload.nbytes`` is the arrays' bytes,
counted honestly (packed bits, indices, scales), so the saving is measured, not assumed. Error feedback is a
separate piece, :class:`ErrorFeedback`, that wraps any compressor and keeps one residual per tensor name.

>>> import numpy as np
>>> from d5.distributed.compression import ErrorFeedback, TopK
>>> gradient = np.linspace(-1.0, 2.0, 1000, dtype=np.float32).reshape(10, 100)
>>> topk = ErrorFeedback(TopK(0.01))
>>> payload = topk.compress(gradient, "fc.weight")
>>> payload.nbytes               # 10 int32 indices + 10 float32 values
80
>>> payload.original_nbytes, round(payload.ratio)
(4000, 50)
>>> restored = topk.decompress(payload)
>>> restored.shape, restored.dtype, int(np.count_nonzero(restored))
((10, 100), dtype('float32'), 10)
>>> bool(np.allclose(restored + topk.memory["fc.weight"], gradient))   # what was not sent is remembered
True

The quantizers (:class:`~d5.distributed.quantization.QSGD`, ``TernGrad``, ``OneBit``) live in
:mod:`d5.distributed.quantization`; :func:`compression_by_name` builds any piece from a recipe's
``--compression`` string, and :func:`allreduce_compressed` reduces one tensor over the ranks with the collective
its payload allows (allreduce when payloads can be summed, allgather otherwise).

Seeds: a stochastic compressor draws from its own ``np.random.default_rng(seed)``, advanced once per
``compress`` call, so a run is reproducible from its seeds. Give each rank a distinct seed (``seed + rank``) so
the ranks' rounding errors are independent and average out.
"""
from __future__ import annotations

import abc
import math
import numbers
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from d5.errors import DistributedError

#: The forms :func:`compression_by_name` accepts, quoted in its errors.
SPEC_FORMS = ("none | fp16 | topk:RATIO | randomk:RATIO | qsgd:BITS | terngrad | onebit "
              "(RATIO in (0, 1], e.g. topk:0.01; BITS in 2..8, e.g. qsgd:8)")

_FP16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class Payload:
    """What one rank sends for one tensor: ``arrays`` (name -> contiguous NumPy array) go on the wire;
    ``shape`` and ``dtype`` are the original tensor's and are known to every rank (same tensor, same name),
    so they are not counted."""

    arrays: dict[str, np.ndarray]
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the sum of the arrays' ``nbytes``."""
        return sum(int(array.nbytes) for array in self.arrays.values())

    @property
    def original_nbytes(self) -> int:
        """Bytes the uncompressed tensor would take."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def ratio(self) -> float:
        """Compression ratio, original bytes / bytes on the wire (``inf`` for an empty payload)."""
        return self.original_nbytes / self.nbytes if self.nbytes else math.inf

    def _wire_order(self) -> list[str]:
        # Widest items first: packed into one buffer that starts aligned, every field then stays aligned.
        return sorted(self.arrays, key=lambda key: (-self.arrays[key].dtype.itemsize, key))

    def to_bytes(self) -> np.ndarray:
        """All arrays in one contiguous ``uint8`` buffer (``nbytes`` long), for a single allgather."""
        if not self.arrays:
            return np.zeros(0, dtype=np.uint8)
        return np.concatenate([np.ascontiguousarray(self.arrays[key]).reshape(-1).view(np.uint8)
                               for key in self._wire_order()])

    def from_bytes(self, buffer: np.ndarray) -> "Payload":
        """Another rank's payload for the same tensor, read from its :meth:`to_bytes` buffer; this payload
        gives the layout (fixed-size payloads have the same layout on every rank)."""
        buffer = np.ascontiguousarray(buffer, dtype=np.uint8).reshape(-1)
        if buffer.size != self.nbytes:
            raise DistributedError(
                f"a received payload has {buffer.size} bytes but this rank's has {self.nbytes}: every rank must "
                f"compress the same tensor with the same compressor settings.")
        arrays, offset = {}, 0
        for key in self._wire_order():
            local = self.arrays[key]
            arrays[key] = np.frombuffer(buffer, dtype=local.dtype, count=local.size,
                                        offset=offset).reshape(local.shape)
            offset += local.nbytes
        return replace(self, arrays=arrays)


def _float_tensor(tensor: Any, name: str, who: str) -> np.ndarray:
    """The tensor as a NumPy array, refused unless it is floating point (gradients are)."""
    array = np.asarray(tensor)
    if not np.issubdtype(array.dtype, np.floating):
        raise DistributedError(
            f"{who} compresses floating-point gradients, but tensor {name!r} has dtype {array.dtype}; "
            f"send it uncompressed (NoCompression) or cast it to float32 first.")
    return array


def check_ratio(ratio: Any, who: str) -> float:
    """``ratio`` as a float in (0, 1], or a DistributedError that says what is valid."""
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0.0 < float(ratio) <= 1.0:
        raise DistributedError(
            f"{who} ratio must be a number in (0, 1], the fraction of elements sent (e.g. 0.01 sends 1%); "
            f"got {ratio!r}.")
    return float(ratio)


def check_seed(seed: Any, who: str) -> int:
    """``seed`` as a non-negative int, or a DistributedError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise DistributedError(f"{who} seed must be a non-negative integer (e.g. base_seed + rank); got {seed!r}.")
    return int(seed)


def check_finite(value: float, name: str, who: str) -> None:
    """Refuse a tensor whose scale (norm, max, mean) is NaN or infinite: quantizing it would send garbage."""
    if not np.isfinite(value):
        raise DistributedError(
            f"{who} cannot quantize tensor {name!r}: it contains NaN or Inf. Training has likely diverged; "
            f"lower the learning rate or clip gradients before compressing.")


class Compressor(abc.ABC):
    """One compression scheme. Subclasses implement :meth:`compress` and :meth:`decompress`.

    ``summable`` is True when payloads from different ranks can be summed element-wise by an allreduce and
    the sum decompressed (e.g. fp16); False means the payloads must be allgathered, each decompressed, and the
    results summed (top-k indices and values, packed bits with per-rank scales).
    """

    summable: bool = False

    @abc.abstractmethod
    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        """The payload for ``tensor``; ``name`` identifies the tensor (for per-tensor state)."""

    @abc.abstractmethod
    def decompress(self, payload: Payload) -> np.ndarray:
        """The tensor a payload stands for, with the original shape and dtype."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in self._config().items())
        return f"{type(self).__name__}({fields})"

    def _config(self) -> dict[str, Any]:
        return {}


class StochasticCompressor(Compressor):
    """A compressor that draws random numbers from its own generator, seeded explicitly."""

    def __init__(self, seed: int = 0):
        self.seed = check_seed(seed, type(self).__name__)
        self.rng = np.random.default_rng(self.seed)


class NoCompression(Compressor):
    """Sends the tensor as it is (any dtype)."""

    summable = True

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = np.asarray(tensor)
        return Payload({"values": np.ascontiguousarray(array).reshape(-1)}, array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        return payload.arrays["values"].reshape(payload.shape).astype(payload.dtype, copy=False)


class FP16(Compressor):
    """Casts to float16 (half the bytes of float32); the sum over ranks is taken in float16, as in Horovod."""

    summable = True

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "FP16")
        peak = float(np.max(np.abs(array))) if array.size else 0.0
        if peak > _FP16_MAX:  # NaN compares False: a diverged tensor passes through unchanged, as NaN
            raise DistributedError(
                f"FP16 cannot represent tensor {name!r}: its largest magnitude {peak:.4g} exceeds float16's "
                f"{_FP16_MAX:.0f}. Scale the loss down, clip gradients, or use another compression (e.g. none).")
        return Payload({"values": array.reshape(-1).astype(np.float16)}, array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        return payload.arrays["values"].astype(payload.dtype).reshape(payload.shape)


def _count_kept(size: int, ratio: float) -> int:
    """How many of ``size`` elements a sparsifier keeps: ``round(size * ratio)``, at least 1 (0 if empty)."""
    return min(size, max(1, round(size * ratio)))


def _index_dtype(size: int) -> type:
    return np.int32 if size <= np.iinfo(np.int32).max else np.int64


class TopK(Compressor):
    """Sends the ``k = round(ratio * n)`` elements of largest magnitude as indices (int32, int64 past 2**31
    elements) and values. Biased: use it with :class:`ErrorFeedback` (as :func:`compression_by_name` does)."""

    def __init__(self, ratio: float):
        self.ratio = check_ratio(ratio, "TopK")

    def _config(self) -> dict[str, Any]:
        return {"ratio": self.ratio}

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "TopK")
        flat = array.reshape(-1)
        kept = _count_kept(flat.size, self.ratio)
        if kept == flat.size:
            indices = np.arange(flat.size)
        else:
            indices = np.sort(np.argpartition(np.abs(flat), flat.size - kept)[flat.size - kept:])
        indices = indices.astype(_index_dtype(flat.size))
        return Payload({"indices": indices, "values": flat[indices]}, array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        dense = np.zeros(math.prod(payload.shape), dtype=payload.dtype)
        dense[payload.arrays["indices"]] = payload.arrays["values"]
        return dense.reshape(payload.shape)


class RandomK(StochasticCompressor):
    """Sends ``k = round(ratio * n)`` elements chosen uniformly without replacement: only a uint64 seed and
    the values go on the wire; the receiver regenerates the indices from the seed. With ``unbiased=True`` the
    values are scaled by ``n / k`` so the expectation equals the input; the default (unscaled, as in GRACE)
    is meant for :class:`ErrorFeedback`. Not summable: each rank (distinct seeds) picks different indices."""

    def __init__(self, ratio: float, seed: int = 0, unbiased: bool = False):
        super().__init__(seed)
        self.ratio = check_ratio(ratio, "RandomK")
        self.unbiased = bool(unbiased)

    def _config(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "seed": self.seed, "unbiased": self.unbiased}

    @staticmethod
    def _indices(seed: np.ndarray, size: int, kept: int) -> np.ndarray:
        return np.random.default_rng(int(seed[0])).choice(size, size=kept, replace=False)

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "RandomK")
        flat = array.reshape(-1)
        kept = _count_kept(flat.size, self.ratio)
        seed = np.array([self.rng.integers(0, 2**63)], dtype=np.uint64)
        values = flat[self._indices(seed, flat.size, kept)]
        if self.unbiased and kept:
            values = values * array.dtype.type(flat.size / kept)
        return Payload({"seed": seed, "values": values}, array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        size = math.prod(payload.shape)
        values = payload.arrays["values"]
        dense = np.zeros(size, dtype=payload.dtype)
        dense[self._indices(payload.arrays["seed"], size, values.size)] = values
        return dense.reshape(payload.shape)


class ErrorFeedback(Compressor):
    """Wraps any compressor with per-tensor error-feedback memory (Seide et al. 2014; Karimireddy et al.
    2019): each call compresses ``tensor + memory[name]`` and keeps what was lost,
    ``memory[name] = tensor + memory[name] - decompress(compress(...))``. Over T steps the decompressed
    outputs plus the final memory sum exactly to the inputs, so nothing is dropped, only delayed."""

    def __init__(self, inner: Compressor):
        if not isinstance(inner, Compressor):
            raise DistributedError(
                f"ErrorFeedback wraps a Compressor (e.g. ErrorFeedback(TopK(0.01))); got {inner!r}.")
        self.inner = inner
        self.memory: dict[str, np.ndarray] = {}

    @property
    def summable(self) -> bool:  # type: ignore[override]
        return self.inner.summable

    def _config(self) -> dict[str, Any]:
        return {"inner": self.inner}

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"

    def reset(self, name: str | None = None) -> None:
        """Forget the memory of one tensor, or of all tensors (e.g. after the model's shapes change)."""
        if name is None:
            self.memory.clear()
        else:
            self.memory.pop(name, None)

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, f"ErrorFeedback({type(self.inner).__name__})")
        memory = self.memory.get(name)
        if memory is None:
            corrected = array.copy()
        elif memory.shape != array.shape:
            raise DistributedError(
                f"tensor {name!r} has shape {array.shape} but its error-feedback memory has {memory.shape}: "
                f"give each tensor its own name, or call reset({name!r}) when a tensor changes shape.")
        else:
            corrected = array + memory
        payload = self.inner.compress(corrected, name)
        self.memory[name] = corrected - self.inner.decompress(payload)
        return payload

    def decompress(self, payload: Payload) -> np.ndarray:
        return self.inner.decompress(payload)


def compression_by_name(spec: str, seed: int = 0) -> Compressor:
    """The compressor a recipe's ``--compression`` string names:

    ``none`` (:class:`NoCompression`), ``fp16`` (:class:`FP16`), ``topk:RATIO`` and ``randomk:RATIO``
    (:class:`TopK` / :class:`RandomK` sending that fraction), ``qsgd:BITS`` (QSGD with BITS bits per element,
    sign included), ``terngrad`` and ``onebit``. ``topk``, ``randomk`` and ``onebit`` are biased and come
    wrapped in :class:`ErrorFeedback`, as GRACE and Horovod users expect; ``qsgd`` and ``terngrad`` are
    unbiased and come without it (wrap them yourself to add it). ``seed`` seeds the stochastic ones; pass a
    distinct seed per rank.

    >>> compression_by_name("topk:0.01")
    ErrorFeedback(TopK(ratio=0.01))
    >>> compression_by_name("qsgd:8", seed=3)
    QSGD(bits=8, seed=3, bucket_size=None)
    """
    from d5.distributed import quantization  # the quantizers import this module

    if not isinstance(spec, str):
        raise DistributedError(f"a compression is named by a string, one of: {SPEC_FORMS}; got {spec!r}.")
    kind, colon, argument = spec.strip().lower().partition(":")
    with_parameter = {"topk": (float, lambda r: ErrorFeedback(TopK(r))),
                      "randomk": (float, lambda r: ErrorFeedback(RandomK(r, seed=seed))),
                      "qsgd": (int, lambda b: quantization.QSGD(b, seed=seed))}
    without_parameter = {"none": NoCompression, "fp16": FP16,
                         "terngrad": lambda: quantization.TernGrad(seed=seed),
                         "onebit": lambda: ErrorFeedback(quantization.OneBit())}
    if kind in without_parameter and not colon:
        return without_parameter[kind]()
    if kind in with_parameter and argument:
        parse, build = with_parameter[kind]
        try:
            value = parse(argument)
        except ValueError:
            raise DistributedError(
                f"compression {spec!r}: {argument!r} is not a valid {'ratio' if parse is float else 'bit count'}."
                f" Valid forms: {SPEC_FORMS}.") from None
        try:
            return build(value)
        except DistributedError as error:
            raise DistributedError(f"compression {spec!r}: {error} Valid forms: {SPEC_FORMS}.") from None
    if kind in with_parameter:
        problem = f"{kind!r} needs a parameter ({kind}:{'0.01' if kind != 'qsgd' else '8'})"
    elif kind in without_parameter:
        problem = f"{kind!r} takes no parameter"
    else:
        problem = f"unknown compression {kind!r}"
    raise DistributedError(f"compression {spec!r}: {problem}. Valid forms: {SPEC_FORMS}.")


class CompressedSum(NamedTuple):
    """What :func:`allreduce_compressed` returns."""

    total: np.ndarray  #: the sum over ranks of the decompressed tensors (original shape and dtype)
    bytes_sent: int  #: this rank's payload bytes (``payload.nbytes``) contributed to the collective


def allreduce_compressed(comm: Any, tensor: np.ndarray, name: str, compressor: Compressor) -> CompressedSum:
    """Compress ``tensor``, reduce it over all ranks, and return the SUM of the ranks' decompressed tensors
    (a scheme divides by ``comm.size`` for the mean) and the bytes this rank put on the wire.

    Contract assumed of ``comm`` (as :class:`~d5.distributed.communication.CommunicationNetwork` provides):
    ``comm.allreduce(array, name=...)`` returns the element-wise sum over ranks, same shape and dtype;
    ``comm.allgather(array, name=...)`` returns every rank's array, in rank order, stacked along a new axis 0
    (shape ``(size, *array.shape)``; a flat concatenation is accepted too); ``name`` only labels the tensor
    in the communicator's messages. Every rank must call this for the
    same tensors in the same order with the same compressor settings, as with any collective.

    Summable payloads (``compressor.summable``) are allreduced array by array and decompressed once.
    Others are packed into one byte buffer, allgathered, and each rank's payload decompressed and summed;
    their layout must be the same on every rank, which holds for every compressor here (sizes depend only on
    the tensor's shape and the settings). ``bytes_sent`` is ``payload.nbytes``; what the collective algorithm
    then moves (e.g. a ring allreduce's 2(P-1)/P of it, an allgather receiving (P-1) payloads) is not included.
    """
    array = np.asarray(tensor)
    payload = compressor.compress(array, name)
    if payload.nbytes == 0:  # an empty tensor: nothing to send on any rank
        return CompressedSum(np.zeros(array.shape, dtype=array.dtype), 0)
    if compressor.summable:
        summed = {key: np.asarray(comm.allreduce(value, name=f"{name}/{key}")) for key, value in payload.arrays.items()}
        total = compressor.decompress(replace(payload, arrays=summed))
    else:
        buffer = payload.to_bytes()
        gathered = np.asarray(comm.allgather(buffer, name=name)).reshape(-1, buffer.size)
        total = np.array(compressor.decompress(payload.from_bytes(gathered[0])), dtype=payload.dtype)
        for row in gathered[1:]:
            total += compressor.decompress(payload.from_bytes(row))
    return CompressedSum(total, payload.nbytes)

"""L3: quantizing compressors -- QSGD, TernGrad, 1-bit -- and the bit packing that makes their wire size real.

Each sends its codes packed (``bits`` per element, most significant bit first) plus float32 scales, so
``payload.nbytes`` is what would really cross the network: for 1M float32 elements, 1-bit sends
125,000 + 8 bytes, TernGrad 250,000 + 4, 8-bit QSGD 1,000,000 + 4 (against 4,000,000 uncompressed).

>>> import numpy as np
>>> from d5.distributed.quantization import OneBit, QSGD
>>> gradient = np.array([0.5, -1.0, 2.0, -0.25, 0.0, 1.5, -3.0, 0.25, 1.0], dtype=np.float32)
>>> payload = OneBit().compress(gradient, "bias")
>>> payload.nbytes                 # 9 sign bits -> 2 bytes, plus two float32 means
10
>>> restored = OneBit().decompress(payload)   # positives -> their mean, negatives -> theirs
>>> restored[:4], restored.dtype
(array([ 0.875    , -1.4166666,  0.875    , -1.4166666], dtype=float32), dtype('float32'))
>>> QSGD(bits=4, seed=0).compress(gradient, "bias").nbytes   # 9 x 4 bits -> 5 bytes, plus one float32 norm
9
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from d5.distributed.compression import (Compressor, Payload, StochasticCompressor, _float_tensor, check_finite)
from d5.errors import DistributedError


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned codes (each below ``2**bits``, 1 <= bits <= 8) into ``ceil(n * bits / 8)`` bytes,
    element after element, most significant bit first."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    if bits == 8:
        return codes
    if 8 % bits == 0:  # 1, 2, 4: whole elements per byte, shifted into place
        per_byte = 8 // bits
        padded = np.zeros(-(-codes.size // per_byte) * per_byte, dtype=np.uint8)
        padded[:codes.size] = codes
        shifts = (bits * np.arange(per_byte - 1, -1, -1)).astype(np.uint8)
        return np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)
    planes = np.unpackbits(codes[:, None], axis=1)[:, 8 - bits:]  # each code's low `bits` bits, MSB first
    return np.packbits(planes.reshape(-1))


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``count`` codes :func:`pack_bits` packed, as uint8."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8).reshape(-1)
    if bits == 8:
        return packed[:count]
    if 8 % bits == 0:
        per_byte = 8 // bits
        shifts = (bits * np.arange(per_byte - 1, -1, -1)).astype(np.uint8)
        codes = (packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)
        return codes.reshape(-1)[:count]
    planes = np.unpackbits(packed, count=count * bits).reshape(count, bits)
    return np.packbits(planes, axis=1).reshape(-1) >> np.uint8(8 - bits)  # packbits pads on the right


def _stochastic_round(magnitude: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``floor(m)`` or ``floor(m) + 1``, the latter with probability ``m - floor(m)``: unbiased, E = m."""
    lower = np.floor(magnitude)
    return lower + (rng.random(magnitude.shape, dtype=np.float32) < (magnitude - lower))


class QSGD(StochasticCompressor):
    """QSGD (Alistarh et al. 2017): each element becomes ``sign(x) * l * norm / s`` with ``l`` an integer level
    in 0..s, rounded stochastically so the expectation is ``x`` (unbiased; no error feedback needed).

    ``bits`` is the bits each element takes on the wire, sign included: ``s = 2**(bits - 1) - 1`` levels, so
    ``QSGD(8)`` sends int8-sized codes in -127..127 (as GRACE does) and ``QSGD(4)`` 4-bit codes in -7..7,
    plus one float32 L2 norm per bucket. ``bucket_size=None`` uses one norm for the whole tensor; the paper's
    buckets (e.g. 512) cut the variance on large tensors at 4 bytes per bucket.
    """

    def __init__(self, bits: int = 8, seed: int = 0, bucket_size: int | None = None):
        super().__init__(seed)
        if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not 2 <= bits <= 8:
            raise DistributedError(
                f"QSGD bits must be an integer in 2..8: the bits per element on the wire, sign included "
                f"(8 sends int8 codes with 127 levels, 2 sends -1/0/+1); for 1 bit per element use onebit. "
                f"Got {bits!r}.")
        if bucket_size is not None and (isinstance(bucket_size, bool) or not isinstance(bucket_size, numbers.Integral)
                                        or bucket_size < 1):
            raise DistributedError(
                f"QSGD bucket_size must be a positive integer (e.g. 512) or None for one norm per tensor; "
                f"got {bucket_size!r}.")
        self.bits = int(bits)
        self.levels = 2 ** (self.bits - 1) - 1
        self.bucket_size = None if bucket_size is None else int(bucket_size)

    def _config(self) -> dict[str, Any]:
        return {"bits": self.bits, "seed": self.seed, "bucket_size": self.bucket_size}

    def _bucket(self, size: int) -> int:
        return self.bucket_size or max(size, 1)

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "QSGD")
        flat = array.reshape(-1)
        bucket = self._bucket(flat.size)
        buckets = np.zeros(-(-flat.size // bucket) * bucket, dtype=array.dtype)
        buckets[:flat.size] = flat
        buckets = buckets.reshape(-1, bucket)
        norms = np.sqrt(np.sum(np.square(buckets, dtype=np.float64), axis=1))
        check_finite(float(np.sum(norms)), name, "QSGD")
        norms = norms.astype(np.float32)
        safe = np.where(norms > 0, norms, 1).astype(np.float64)[:, None]
        # |x| <= norm, but the float32 norm may round below it: clamp so a code never leaves -s..s
        levels = np.minimum(_stochastic_round(np.abs(buckets) * (self.levels / safe), self.rng), self.levels)
        codes = (np.sign(buckets) * levels + self.levels).astype(np.uint8).reshape(-1)[:flat.size]  # 0..2s
        return Payload({"norms": norms, "codes": pack_bits(codes, self.bits)}, array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        size = int(np.prod(payload.shape))
        norms = payload.arrays["norms"]
        bucket = self._bucket(size)
        codes = np.full(norms.size * bucket, self.levels, dtype=np.int16)  # the last bucket's padding: zeros
        codes[:size] = unpack_bits(payload.arrays["codes"], self.bits, size)
        codes -= self.levels
        work = np.result_type(payload.dtype, np.float32)  # a float16 tensor's norm may exceed float16's range
        values = codes.reshape(-1, bucket) * (norms.astype(work) / work.type(self.levels))[:, None]
        return values.reshape(-1)[:size].astype(payload.dtype).reshape(payload.shape)


class TernGrad(StochasticCompressor):
    """TernGrad (Wen et al. 2017): each element becomes ``scale * b`` with ``b`` in {-1, 0, +1},
    ``P(b = sign(x)) = |x| / scale``, ``scale = max |x|``: unbiased; 2 bits per element packed plus one float32
    scale. ``clip_sigmas`` (the paper's and GRACE's 2.5) first clips to that many standard deviations, which
    lowers the variance but biases the clipped elements; the default ``None`` keeps it unbiased."""

    def __init__(self, seed: int = 0, clip_sigmas: float | None = None):
        super().__init__(seed)
        if clip_sigmas is not None and (isinstance(clip_sigmas, bool) or not isinstance(clip_sigmas, numbers.Real)
                                        or not 0 < float(clip_sigmas) < float("inf")):
            raise DistributedError(
                f"TernGrad clip_sigmas must be a positive number of standard deviations (the paper uses 2.5) "
                f"or None for no clipping; got {clip_sigmas!r}.")
        self.clip_sigmas = None if clip_sigmas is None else float(clip_sigmas)

    def _config(self) -> dict[str, Any]:
        return {"seed": self.seed, "clip_sigmas": self.clip_sigmas}

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "TernGrad")
        flat = array.reshape(-1)
        if self.clip_sigmas is not None and flat.size:
            bound = self.clip_sigmas * float(np.std(flat))
            flat = np.clip(flat, -bound, bound)
        scale = float(np.max(np.abs(flat))) if flat.size else 0.0
        check_finite(scale, name, "TernGrad")
        keep = _stochastic_round(np.abs(flat) / (scale or 1.0), self.rng)
        codes = (np.sign(flat) * keep + 1).astype(np.uint8)  # offset: 0, 1, 2
        return Payload({"scale": np.array([scale], dtype=np.float32), "codes": pack_bits(codes, 2)},
                       array.shape, array.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        size = int(np.prod(payload.shape))
        codes = unpack_bits(payload.arrays["codes"], 2, size).astype(np.int8) - 1
        return (codes * payload.arrays["scale"].astype(payload.dtype)).reshape(payload.shape)


class OneBit(Compressor):
    """1-bit SGD (Seide et al. 2014): one packed sign bit per element; positives are reconstructed as the mean
    of the positives, negatives as the mean of the negatives (two float32 scales), or with
    ``two_scales=False`` as +/- the mean magnitude (one scale). As in the paper, which quantizes each column of a
    weight matrix on its own, a tensor of two or more dimensions gets its scales per slice along its first axis
    (an output neuron or channel: whose gradients share a magnitude) when its rows hold at least ``min_row``
    elements (64: the scales then add at most one bit per element) unless ``per_row=False``; other tensors get
    one set. Biased: use it with :class:`~d5.distributed.compression.ErrorFeedback`, as
    ``compression_by_name("onebit")`` does."""

    def __init__(self, two_scales: bool = True, per_row: bool = True, min_row: int = 64):
        self.two_scales = bool(two_scales)
        self.per_row = bool(per_row)
        if isinstance(min_row, bool) or not isinstance(min_row, numbers.Integral) or min_row < 1:
            raise DistributedError(f"OneBit(min_row={min_row!r}): the shortest row given its own scales must be an "
                                   "integer >= 1 (64 by default)")
        self.min_row = int(min_row)

    def _config(self) -> dict[str, Any]:
        return {"two_scales": self.two_scales, "per_row": self.per_row, "min_row": self.min_row}

    def _rows(self, shape: tuple[int, ...], size: int) -> int:
        """How many rows get their own scales: the first axis's length, or 1 (the whole tensor)."""
        if self.per_row and len(shape) >= 2 and shape[0] > 0 and size // shape[0] >= self.min_row:
            return shape[0]
        return 1

    def compress(self, tensor: np.ndarray, name: str) -> Payload:
        array = _float_tensor(tensor, name, "OneBit")
        table = array.reshape(self._rows(array.shape, array.size), -1)
        positive = table >= 0
        with np.errstate(invalid="ignore", over="ignore"):  # a NaN/Inf tensor is refused just below, by name
            scales = self._scales(table, positive)
        check_finite(float(np.sum(scales)), name, "OneBit")
        return Payload({"scales": scales.astype(np.float32).reshape(-1), "signs": pack_bits(positive, 1)},
                       array.shape, array.dtype)

    def _scales(self, table: np.ndarray, positive: np.ndarray) -> np.ndarray:
        """(rows, 2): the mean of each row's positives and of its negatives; (rows, 1): its mean magnitude."""
        if not self.two_scales:
            return np.mean(np.abs(table), axis=1, dtype=np.float64)[:, None] if table.size else np.zeros((1, 1))
        count = np.count_nonzero(positive, axis=1)
        lower = table.shape[1] - count
        total = np.sum(table, axis=1, dtype=np.float64)
        upper = np.sum(table, axis=1, where=positive, dtype=np.float64)
        return np.stack([np.divide(upper, count, out=np.zeros_like(upper), where=count > 0),
                         np.divide(total - upper, lower, out=np.zeros_like(upper), where=lower > 0)], axis=1)

    def decompress(self, payload: Payload) -> np.ndarray:
        size = int(np.prod(payload.shape))
        rows = self._rows(payload.shape, size)
        scales = payload.arrays["scales"].astype(payload.dtype).reshape(rows, -1)
        positive, negative = (scales[:, :1], scales[:, 1:]) if scales.shape[1] == 2 else (scales, -scales)
        signs = unpack_bits(payload.arrays["signs"], 1, size).astype(bool).reshape(rows, -1)
        return np.where(signs, positive, negative).astype(payload.dtype).reshape(payload.shape)

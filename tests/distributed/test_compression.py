"""Gradient compression pieces (d5.distributed.compression / .quantization), without MPI.

The collective helper is tested against ``_SimulatedRanks``, an in-process stand-in for just ``allreduce`` and
``allgather`` that exists only for that helper's test; real MPI tests run the same helper under mpiexec.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from d5.distributed.compression import (FP16, SPEC_FORMS, Compressor, ErrorFeedback, NoCompression, Payload,
                                        RandomK, TopK, allreduce_compressed, compression_by_name)
from d5.distributed.quantization import QSGD, OneBit, TernGrad, pack_bits, unpack_bits
from d5.errors import DistributedError

SPECS = ["none", "fp16", "topk:0.1", "randomk:0.1", "qsgd:8", "qsgd:4", "qsgd:3", "qsgd:2", "terngrad", "onebit"]


def _gradient(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- round trips -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", [(), (1,), (3, 5, 7), (0,), (2, 0, 3), (1000,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_round_trip_keeps_shape_and_dtype(spec, shape, dtype):
    compressor = compression_by_name(spec, seed=1)
    tensor = _gradient(shape, dtype=dtype)
    payload = compressor.compress(tensor, "w")
    restored = compressor.decompress(payload)
    assert restored.shape == tensor.shape and restored.dtype == tensor.dtype
    assert np.all(np.isfinite(restored))
    for array in payload.arrays.values():
        assert isinstance(array, np.ndarray) and array.flags.c_contiguous


def test_none_is_exact_for_any_dtype():
    for tensor in (_gradient((4, 6)), np.arange(12, dtype=np.int64).reshape(3, 4)):
        payload = NoCompression().compress(tensor, "t")
        np.testing.assert_array_equal(NoCompression().decompress(payload), tensor)
        assert payload.nbytes == tensor.nbytes and payload.ratio == 1.0


def test_fp16_is_exact_within_half_precision():
    tensor = _gradient((64, 33), dtype=np.float64) * 100
    restored = FP16().decompress(FP16().compress(tensor, "t"))
    np.testing.assert_allclose(restored, tensor, rtol=2.0 ** -11, atol=0)
    assert restored.dtype == np.float64


def test_quantizers_are_exact_on_their_own_grid():
    # Values already on the quantization grid leave no room for rounding: decompression is exact.
    tensor = np.array([3.0, -3.0, 0.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(TernGrad(seed=0).decompress(TernGrad(seed=0).compress(tensor, "t")), tensor)
    np.testing.assert_array_equal(OneBit().decompress(OneBit().compress(np.array([2.0, -2.0, 2.0]), "t")),
                                  [2.0, -2.0, 2.0])


def test_onebit_keeps_each_row_s_means_as_1_bit_sgd_quantizes_each_column():
    # Two rows whose magnitudes differ a thousandfold: one pair of means for the whole tensor would give the small
    # row the large row's values; per row, each row's positives and negatives come back as their own means.
    weight = np.array([[1000.0, 3000.0, -2000.0, -4000.0], [1.0, 3.0, -2.0, -4.0]], dtype=np.float32)
    restored = OneBit(min_row=4).decompress(OneBit(min_row=4).compress(weight, "w"))
    np.testing.assert_array_equal(restored, [[2000.0, 2000.0, -3000.0, -3000.0], [2.0, 2.0, -3.0, -3.0]])
    assert OneBit(min_row=4).compress(weight, "w").nbytes == 1 + 2 * 2 * 4  # 8 sign bits, two float32 means a row
    # rows shorter than min_row (64 by default) share one pair: their scales would cost more than their bits
    assert OneBit().compress(weight, "w").nbytes == 1 + 2 * 4
    np.testing.assert_array_equal(OneBit().decompress(OneBit().compress(weight, "w")),
                                  OneBit(per_row=False).decompress(OneBit(per_row=False).compress(weight, "w")))
    whole = OneBit(per_row=False).decompress(OneBit(per_row=False).compress(weight, "w"))
    np.testing.assert_allclose(whole[1], [1001.0, 1001.0, -1501.5, -1501.5])
    single = OneBit(two_scales=False, min_row=4)
    np.testing.assert_array_equal(single.decompress(single.compress(weight, "w")),
                                  [[2500.0, 2500.0, -2500.0, -2500.0], [2.5, 2.5, -2.5, -2.5]])


# --- unbiasedness ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda seed: QSGD(8, seed=seed), lambda seed: QSGD(4, seed=seed),
                                  lambda seed: QSGD(2, seed=seed), lambda seed: QSGD(3, seed=seed, bucket_size=16),
                                  lambda seed: TernGrad(seed=seed),
                                  lambda seed: RandomK(0.25, seed=seed, unbiased=True)],
                         ids=["qsgd8", "qsgd4", "qsgd2", "qsgd3-bucket16", "terngrad", "randomk-scaled"])
def test_stochastic_compressors_are_unbiased(make):
    tensor = _gradient(64, seed=7)
    draws = 4000
    compressor = make(11)
    samples = np.stack([compressor.decompress(compressor.compress(tensor, "t")) for _ in range(draws)])
    mean = samples.mean(axis=0, dtype=np.float64)
    standard_error = samples.std(axis=0, dtype=np.float64) / np.sqrt(draws)
    # 5 standard errors per element (and a floor for elements quantized exactly); seeded, so deterministic
    worst = np.max(np.abs(mean - tensor) / (standard_error + 1e-12))
    assert np.all(np.abs(mean - tensor) <= 5 * standard_error + 1e-6), worst
    assert samples.std(axis=0).max() > 0  # genuinely random


def test_unscaled_randomk_is_biased():
    # The reason compression_by_name wraps them in error feedback.
    tensor = _gradient(64, seed=7)
    compressor = RandomK(0.25, seed=3)
    mean = np.mean([compressor.decompress(compressor.compress(tensor, "t")) for _ in range(2000)], axis=0)
    np.testing.assert_allclose(mean, 0.25 * tensor, atol=0.1)


# --- top-k -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, kept", [(0.01, 10), (0.1, 100), (0.0004, 1), (1.0, 1000)])
def test_topk_keeps_exactly_the_k_largest_magnitudes(ratio, kept):
    tensor = _gradient((25, 40), seed=3)
    payload = TopK(ratio).compress(tensor, "t")
    restored = TopK(ratio).decompress(payload)
    largest = np.argsort(np.abs(tensor).ravel())[::-1][:kept]
    assert set(np.flatnonzero(restored).tolist()) == set(largest.tolist())
    np.testing.assert_array_equal(restored.ravel()[largest], tensor.ravel()[largest])
    assert payload.arrays["indices"].dtype == np.int32 and payload.arrays["values"].size == kept


# --- error feedback ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("inner", [TopK(0.05), RandomK(0.1, seed=2), OneBit(), OneBit(two_scales=False),
                                   QSGD(4, seed=5), TernGrad(seed=6), FP16()], ids=repr)
def test_error_feedback_loses_nothing(inner):
    compressor = ErrorFeedback(inner)
    inputs = [_gradient((10, 20), seed=step, dtype=np.float64) for step in range(30)]
    outputs = [compressor.decompress(compressor.compress(tensor, "layer")) for tensor in inputs]
    np.testing.assert_allclose(np.sum(outputs, axis=0) + compressor.memory["layer"], np.sum(inputs, axis=0),
                               rtol=0, atol=1e-9)
    assert compressor.summable == inner.summable


def test_error_feedback_keeps_memory_per_tensor_name():
    compressor = ErrorFeedback(TopK(0.1))
    a, b = _gradient(50, seed=1), _gradient((5, 5), seed=2)
    compressor.compress(a, "a")
    compressor.compress(b, "b")
    assert compressor.memory["a"].shape == (50,) and compressor.memory["b"].shape == (5, 5)
    np.testing.assert_allclose(compressor.memory["a"], a - TopK(0.1).decompress(TopK(0.1).compress(a, "a")))
    compressor.reset("a")
    assert set(compressor.memory) == {"b"}
    compressor.reset()
    assert compressor.memory == {}


def test_error_feedback_refuses_a_tensor_that_changed_shape():
    compressor = ErrorFeedback(TopK(0.1))
    compressor.compress(np.ones(10, dtype=np.float32), "w")
    with pytest.raises(DistributedError, match=r"reset\('w'\)"):
        compressor.compress(np.ones(11, dtype=np.float32), "w")


# --- bytes on the wire -------------------------------------------------------------------------------------

MILLION = 1_000_000
WIRE_BYTES = {  # spec -> payload bytes for 1M float32 elements (4,000,000 uncompressed)
    "none": 4_000_000,
    "fp16": 2_000_000,
    "topk:0.01": 10_000 * 4 + 10_000 * 4,     # int32 indices + float32 values
    "randomk:0.01": 8 + 10_000 * 4,           # uint64 seed + float32 values
    "qsgd:8": MILLION + 4,                    # int8-sized codes + float32 norm
    "qsgd:4": MILLION // 2 + 4,
    "qsgd:3": 375_000 + 4,
    "qsgd:2": MILLION // 4 + 4,
    "terngrad": MILLION // 4 + 4,             # 2 bits per element + float32 scale
    "onebit": MILLION // 8 + 8,               # 1 bit per element + two float32 means
}


@pytest.fixture(scope="module")
def million():
    return _gradient(MILLION, seed=42)


@pytest.mark.parametrize("spec", list(WIRE_BYTES))
def test_bytes_on_the_wire_are_counted(spec, million):
    payload = compression_by_name(spec).compress(million, "big")
    assert payload.nbytes == WIRE_BYTES[spec] == payload.to_bytes().size
    assert payload.original_nbytes == 4 * MILLION
    assert payload.ratio == pytest.approx(4 * MILLION / WIRE_BYTES[spec])


def test_wire_size_of_onebit_is_about_125_kb_and_qsgd_bucket_norms_are_counted(million):
    assert OneBit().compress(million, "big").nbytes == 125_008
    assert OneBit(two_scales=False).compress(million, "big").nbytes == 125_004
    # codes without the last bucket's padding, plus ceil(1e6 / 512) float32 norms
    assert QSGD(8, bucket_size=512).compress(million, "big").nbytes == MILLION + 4 * 1954


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 1001])
def test_bits_are_packed_densely_and_unpack_exactly(bits, count):
    codes = np.random.default_rng(bits * 100 + count).integers(0, 2 ** bits, size=count).astype(np.uint8)
    packed = pack_bits(codes, bits)
    assert packed.dtype == np.uint8 and packed.size == -(-count * bits // 8)
    np.testing.assert_array_equal(unpack_bits(packed, bits, count), codes)


def test_bit_packing_is_msb_first_like_numpy_packbits():
    codes = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1], dtype=np.uint8)
    np.testing.assert_array_equal(pack_bits(codes, 1), np.packbits(codes))
    assert pack_bits(np.array([1, 2, 0, 3], dtype=np.uint8), 2).tolist() == [0b01100011]


def test_payload_byte_buffer_round_trips():
    payload = ErrorFeedback(TopK(0.2)).compress(_gradient((7, 9)), "t")
    buffer = payload.to_bytes()
    again = payload.from_bytes(buffer.copy())
    assert again.arrays.keys() == payload.arrays.keys()
    for key in payload.arrays:
        np.testing.assert_array_equal(again.arrays[key], payload.arrays[key])
        assert again.arrays[key].dtype == payload.arrays[key].dtype
    with pytest.raises(DistributedError, match="same compressor settings"):
        payload.from_bytes(buffer[:-1])


# --- determinism -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["randomk:0.1", "qsgd:8", "qsgd:2", "terngrad"])
def test_stochastic_compressors_are_deterministic_given_a_seed(spec):
    tensor = _gradient(500, seed=4)

    def run(seed):
        compressor = compression_by_name(spec, seed=seed)
        return [compressor.compress(tensor, "t").to_bytes() for _ in range(3)]

    first, again, other = run(9), run(9), run(10)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, c) for a, c in zip(first, other))
    assert not np.array_equal(first[0], first[1])  # the generator advances between calls


# --- compression_by_name and bad input ---------------------------------------------------------------------

def test_compression_by_name_builds_the_pieces():
    assert isinstance(compression_by_name("none"), NoCompression)
    assert isinstance(compression_by_name(" FP16 "), FP16)
    for spec, inner in [("topk:0.01", TopK), ("randomk:0.5", RandomK), ("onebit", OneBit)]:
        compressor = compression_by_name(spec)
        assert isinstance(compressor, ErrorFeedback) and isinstance(compressor.inner, inner)
    assert repr(compression_by_name("qsgd:4", seed=2)) == "QSGD(bits=4, seed=2, bucket_size=None)"
    assert repr(compression_by_name("terngrad")) == "TernGrad(seed=0, clip_sigmas=None)"
    assert compression_by_name("randomk:0.5", seed=8).inner.seed == 8
    assert compression_by_name("none").summable and compression_by_name("fp16").summable
    assert not any(compression_by_name(spec).summable for spec in SPECS[2:])


@pytest.mark.parametrize("spec, says", [
    ("topk:0", "in (0, 1]"), ("topk:1.5", "in (0, 1]"), ("topk:-0.1", "in (0, 1]"), ("topk:nan", "in (0, 1]"),
    ("randomk:2", "in (0, 1]"), ("topk:abc", "not a valid ratio"), ("topk", "needs a parameter"),
    ("topk:", "needs a parameter"), ("qsgd:9", "2..8"), ("qsgd:0", "2..8"), ("qsgd:1", "use onebit"),
    ("qsgd:2.5", "not a valid bit count"), ("qsgd", "needs a parameter"), ("onebit:1", "takes no parameter"),
    ("fp16:2", "takes no parameter"), ("gzip", "unknown compression 'gzip'"), ("", "unknown compression"),
])
def test_bad_specs_are_refused_with_the_valid_forms(spec, says):
    with pytest.raises(DistributedError) as caught:
        compression_by_name(spec)
    assert says in str(caught.value) and SPEC_FORMS in str(caught.value)


@pytest.mark.parametrize("build, says", [
    (lambda: TopK(0), "ratio must be a number in (0, 1]"), (lambda: TopK("0.1"), "in (0, 1]"),
    (lambda: TopK(True), "in (0, 1]"), (lambda: RandomK(1.01), "in (0, 1]"),
    (lambda: RandomK(0.1, seed=-1), "non-negative integer"), (lambda: QSGD(bits=16), "2..8"),
    (lambda: QSGD(bits=8.0), "2..8"), (lambda: QSGD(bucket_size=0), "positive integer"),
    (lambda: TernGrad(clip_sigmas=0), "positive number"), (lambda: TernGrad(seed=1.5), "non-negative integer"),
    (lambda: ErrorFeedback("topk"), "wraps a Compressor"), (lambda: compression_by_name(0.01), "string"),
])
def test_bad_parameters_are_refused(build, says):
    with pytest.raises(DistributedError) as caught:
        build()
    assert says in str(caught.value)


@pytest.mark.parametrize("compressor", [FP16(), TopK(0.5), QSGD(), TernGrad(), OneBit(), ErrorFeedback(OneBit())],
                         ids=repr)
def test_integer_tensors_are_refused(compressor):
    with pytest.raises(DistributedError, match="floating-point gradients.*NoCompression"):
        compressor.compress(np.arange(10), "step_count")


@pytest.mark.parametrize("compressor", [QSGD(), TernGrad(), OneBit()], ids=repr)
def test_non_finite_tensors_are_refused_by_quantizers(compressor):
    for bad in (np.nan, np.inf):
        with pytest.raises(DistributedError, match="NaN or Inf.*learning rate"):
            compressor.compress(np.array([1.0, bad, -2.0], dtype=np.float32), "w")


def test_fp16_refuses_values_it_cannot_represent():
    with pytest.raises(DistributedError, match="exceeds float16"):
        FP16().compress(np.array([1.0, 1e6], dtype=np.float32), "w")


# --- the collective helper ---------------------------------------------------------------------------------

class _SimulatedRanks:
    """In-process stand-in for ``size`` ranks, ONLY for allreduce_compressed's unit test: each rank runs in a
    thread; ``allreduce`` sums the ranks' arrays, ``allgather`` stacks them along a new axis 0 (or concatenates,
    with ``stack=False``). It records which collective each rank called and with how many bytes."""

    def __init__(self, size, stack=True):
        self.size, self.stack = size, stack
        self.calls = []
        self._slots = [None] * size
        self._barrier = threading.Barrier(size, timeout=30)

    def _exchange(self, rank, array):
        self._slots[rank] = np.array(array, copy=True)
        self._barrier.wait()
        everything = list(self._slots)
        self._barrier.wait()
        return everything

    def run(self, function):
        """``function(comm)`` on every rank at once; the per-rank results in rank order."""
        with ThreadPoolExecutor(self.size) as pool:
            return list(pool.map(lambda rank: function(_SimulatedComm(self, rank)), range(self.size)))


class _SimulatedComm:
    def __init__(self, ranks, rank):
        self.ranks, self.rank, self.size = ranks, rank, ranks.size

    def allreduce(self, array, *, name=None):
        assert name in ("w/values", "t/values")  # the tensor name and the payload field
        self.ranks.calls.append(("allreduce", self.rank, array.nbytes))
        return np.sum(np.stack(self.ranks._exchange(self.rank, array)), axis=0).astype(array.dtype)

    def allgather(self, array, *, name=None):
        assert name in ("w", "t", "e")
        self.ranks.calls.append(("allgather", self.rank, array.nbytes))
        everything = self.ranks._exchange(self.rank, array)
        return np.stack(everything) if self.ranks.stack else np.concatenate(everything)


@pytest.mark.parametrize("spec, collective", [("none", "allreduce"), ("fp16", "allreduce"),
                                              ("topk:0.05", "allgather"), ("randomk:0.05", "allgather"),
                                              ("qsgd:8", "allgather"), ("qsgd:3", "allgather"),
                                              ("terngrad", "allgather"), ("onebit", "allgather")])
@pytest.mark.parametrize("stack", [True, False], ids=["stacked", "concatenated"])
def test_allreduce_compressed_sums_over_ranks_with_the_right_collective(spec, collective, stack):
    size, shape = 3, (13, 17)
    tensors = [_gradient(shape, seed=100 + rank) for rank in range(size)]
    compressors = [compression_by_name(spec, seed=rank) for rank in range(size)]
    ranks = _SimulatedRanks(size, stack=stack)
    results = ranks.run(lambda comm: allreduce_compressed(comm, tensors[comm.rank], "w", compressors[comm.rank]))

    # The same compressors, run alone, say what each rank contributed.
    twins = [compression_by_name(spec, seed=rank) for rank in range(size)]
    payloads = [twin.compress(tensor, "w") for twin, tensor in zip(twins, tensors)]
    expected = np.sum([twin.decompress(payload) for twin, payload in zip(twins, payloads)], axis=0)
    tolerance = 2.0 ** -9 * size if spec == "fp16" else 1e-5  # fp16 payloads are summed in float16
    for total, bytes_sent in results:
        assert total.shape == shape and total.dtype == np.float32
        np.testing.assert_allclose(total, expected, rtol=tolerance, atol=tolerance)
        assert bytes_sent == payloads[0].nbytes
    assert {name for name, _, _ in ranks.calls} == {collective}
    if collective == "allgather":  # one packed buffer per rank
        assert sorted(ranks.calls) == [("allgather", rank, payloads[0].nbytes) for rank in range(size)]
    if spec == "none":
        np.testing.assert_allclose(results[0].total, np.sum(tensors, axis=0), rtol=1e-6)


def test_allreduce_compressed_with_error_feedback_converges_to_the_sum_over_steps():
    size, steps, shape = 2, 40, (50,)
    compressors = [compression_by_name("topk:0.1", seed=rank) for rank in range(size)]
    inputs = [[_gradient(shape, seed=1000 * rank + step) for step in range(steps)] for rank in range(size)]
    ranks = _SimulatedRanks(size)
    totals = ranks.run(lambda comm: np.sum([allreduce_compressed(comm, inputs[comm.rank][step], "w",
                                                                  compressors[comm.rank]).total
                                             for step in range(steps)], axis=0))
    leftover = sum(compressor.memory["w"] for compressor in compressors)
    np.testing.assert_allclose(totals[0] + leftover, np.sum(inputs, axis=(0, 1)), atol=1e-4)


def test_allreduce_compressed_of_an_empty_tensor_sends_nothing():
    ranks = _SimulatedRanks(2)
    results = ranks.run(lambda comm: allreduce_compressed(comm, np.zeros((0, 4), np.float32), "e", TopK(0.1)))
    assert all(total.shape == (0, 4) and sent == 0 for total, sent in results) and ranks.calls == []


def test_a_custom_compressor_needs_only_compress_and_decompress():
    class Halve(Compressor):  # the whole contract of a user's own piece
        summable = True

        def compress(self, tensor, name):
            values = np.asarray(tensor, np.float32).ravel() / 2
            return Payload({"values": values}, np.shape(tensor), np.dtype(np.float32))

        def decompress(self, payload):
            return (payload.arrays["values"] * 2).reshape(payload.shape)

    tensor = _gradient((4, 4))
    results = _SimulatedRanks(2).run(lambda comm: allreduce_compressed(comm, tensor, "t", ErrorFeedback(Halve())))
    np.testing.assert_allclose(results[1].total, 2 * tensor)
    assert repr(ErrorFeedback(Halve())) == "ErrorFeedback(Halve())"


@pytest.mark.parametrize("min_row", [0, -3, 2.5, True, "64"])
def test_onebit_refuses_a_bad_min_row(min_row):
    with pytest.raises(DistributedError, match="min_row.*integer >= 1"):
        OneBit(min_row=min_row)

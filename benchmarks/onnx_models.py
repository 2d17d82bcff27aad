"""ONNX figures of issue 3, measured in one run:

1. importing ResNet-50 (ImageNet, 25.6 M parameters) from an ONNX file with ``d5.Network.from_onnx``
   (target: at most 2 s; onnx.load of the same file is timed alongside as the floor);
2. reference-framework inference throughput of ResNet-44 (CIFAR, batch 64) relative to onnxruntime on
   the same exported model (target: at least 0.3x). Batches alternate between the two runtimes;
3. how much of that the packed AVX-512 convolution kernel contributes: the same inference with it switched
   off (``d5._C.set_packed_conv(False)``: im2col + BLAS), alternating batches (no target; skipped on CPUs
   without AVX-512).

    python benchmarks/onnx_models.py --repeats 10 --output results/onnx_models.json
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import d5
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize


def import_times(path: Path, repeats: int) -> tuple[list[float], list[float]]:
    import onnx

    d5_times, onnx_times = [], []
    d5.Network.from_onnx(path)  # warm-up: imports, schema tables
    for _ in range(repeats):
        start = time.perf_counter()
        onnx.load(path)
        onnx_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        d5.Network.from_onnx(path)
        d5_times.append(time.perf_counter() - start)
    return d5_times, onnx_times


def cifar_feeds(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    # onnxruntime insists on every graph input, so both runtimes get labels and also compute the loss.
    return {"input": rng.normal(size=(batch, 3, 32, 32)).astype(np.float32),
            "label": rng.integers(0, 10, batch).astype(np.int64)}


def inference_times(network, batch: int, repeats: int) -> tuple[list[float], list[float]]:
    import onnxruntime as ort

    feeds = cifar_feeds(batch)
    executor = d5.frameworks.reference.from_model(network)
    session = ort.InferenceSession(network.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):  # warm-up
        executor.inference(feeds)
        session.run(["output"], feeds)
    d5_times, ort_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(["output"], feeds)
        ort_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        executor.inference(feeds)
        d5_times.append(time.perf_counter() - start)
    return d5_times, ort_times


def packed_conv_times(network, batch: int, repeats: int) -> tuple[list[float], list[float]] | None:
    """Reference inference times with the packed convolution kernel on and off (None without AVX-512)."""
    from d5.frameworks.reference.kernels import load_native

    native = load_native()
    if not native.packed_conv_available():
        return None
    feeds = cifar_feeds(batch)
    executor = d5.frameworks.reference.from_model(network)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for repeat in range(repeats + 1):  # the first round is warm-up
            for packed in (True, False):
                native.set_packed_conv(packed)
                start = time.perf_counter()
                executor.inference(feeds)
                if repeat:
                    times[packed].append(time.perf_counter() - start)
    finally:
        native.set_packed_conv(True)
    return times[True], times[False]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--output", default="results/onnx_models.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50.onnx"
        d5.save_onnx(d5.models.resnet(50, dataset="imagenet"), path)
        d5_import, onnx_load = import_times(path, args.repeats)
    import_summary = summarize(d5_import)
    print(f"ResNet-50 import: {import_summary.format('s')} (onnx.load alone {summarize(onnx_load).format('s')})")

    d5_infer, ort_infer = inference_times(d5.models.resnet(44), args.batch, args.repeats)
    # Throughput ratio d5/onnxruntime = time ratio onnxruntime/d5.
    ratio = compare(ort_infer, d5_infer)
    print(f"ResNet-44 inference, batch {args.batch}: d5 {summarize(d5_infer).format('s')}, "
          f"onnxruntime {summarize(ort_infer).format('s')}; d5 throughput = {ratio} of onnxruntime's")
    packed = packed_conv_times(d5.models.resnet(44), args.batch, args.repeats)
    packed_speedup = None
    if packed is not None:
        packed_speedup = compare(packed[1], packed[0])
        print(f"packed AVX-512 Conv kernel: inference {summarize(packed[0]).format('s')} vs im2col+BLAS "
              f"{summarize(packed[1]).format('s')}; speed-up {packed_speedup}")
    figures = {
        "resnet50_import_seconds": import_summary,
        "resnet50_onnx_load_seconds": summarize(onnx_load),
        "resnet50_import_target_seconds": 2.0,
        "resnet50_import_met": bool(import_summary.median <= 2.0),
        "resnet44_batch": args.batch,
        "resnet44_reference_seconds_per_batch": summarize(d5_infer),
        "resnet44_onnxruntime_seconds_per_batch": summarize(ort_infer),
        "resnet44_throughput_ratio_reference_over_onnxruntime": ratio,
        "resnet44_throughput_target_ratio": 0.3,
        "resnet44_throughput_met": bool(ratio.ratio >= 0.3),
        "resnet44_packed_conv_speedup": packed_speedup,
    }
    print(f"wrote {write_result(args.output, 'onnx_models', figures, extra={'repeats': args.repeats})}")


if __name__ == "__main__":
    main()

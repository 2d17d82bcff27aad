"""The reference framework computes the same bits at any thread count (1, 2, 3, 4 and 8, oversubscribed on
a 2-core machine): its kernels never reduce across threads in an order the scheduler picks.

Each thread count runs in a fresh process (OMP_NUM_THREADS is read when the OpenMP runtime loads), which
prints hashes of what it computed; the test compares the hashes across thread counts.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

THREAD_COUNTS = (1, 2, 3, 4, 8)

# Kernel calls repeated 10 times (the old critical-section reduction gave up to 30 distinct results in 30
# calls), then three SGD steps of a small CNN with batch normalization, trained from a fixed seed.
SCRIPT = textwrap.dedent("""
    import hashlib, json
    import numpy as np
    import d5
    from d5.frameworks import reference
    from d5.frameworks.reference.kernels import load_native

    def digest(*arrays):
        return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()[:16]

    native = load_native()
    rng = np.random.default_rng(0)
    out = {"threads": native.max_threads()}
    for dtype in (np.float32, np.float64):
        for batch in (1, 3, 32):
            x = rng.standard_normal((batch, 8, 12, 12)).astype(dtype)
            w = rng.standard_normal((16, 8, 3, 3)).astype(dtype)
            dy = rng.standard_normal((batch, 16, 12, 12)).astype(dtype)
            key = f"{np.dtype(dtype).name} batch {batch}"
            out[f"conv backward {key}"] = sorted({
                digest(*native.conv2d_backward(dy, x, w, (1, 1), (1, 1), (1, 1), 1, True, True)) for _ in range(10)})
            out[f"conv forward {key}"] = sorted({
                digest(native.conv2d_forward(x, w, None, (1, 1), (1, 1), (1, 1), (12, 12), 1)) for _ in range(3)})
        # Weights past 512 KB: the weight gradient by tiles of dW rather than by images.
        x = rng.standard_normal((3, 48, 8, 8)).astype(dtype)
        w = rng.standard_normal((64, 48, 7, 7)).astype(dtype)
        dy = rng.standard_normal((3, 64, 8, 8)).astype(dtype)
        out[f"conv backward large weights {np.dtype(dtype).name}"] = sorted({
            digest(*native.conv2d_backward(dy, x, w, (1, 1), (3, 3), (1, 1), 1, True, True)) for _ in range(5)})

    b = d5.models.builder.NetworkBuilder("cnn", input_shape=(3, 16, 16), num_classes=4, seed=7)
    h = b.max_pool(b.relu(b.batch_norm(b.conv(b.input, 8, kernel=3, pad=1))), 2)
    h = b.relu(b.conv(h, 8, kernel=1))  # pointwise: the GEMM on the image itself
    net = b.classifier(b.linear(b.flatten(h), 4))
    executor = reference.from_model(net)
    optimizer = reference.GradientDescent(executor, lr=0.1)
    losses = []
    for step in range(3):
        batch = {"input": rng.standard_normal((16, 3, 16, 16)).astype(np.float32),
                 "label": rng.integers(0, 4, 16).astype(np.int64)}
        losses.append(float(optimizer.step(batch)["loss"]))
    out["losses"] = losses
    out["params"] = digest(*executor.network.fetch_tensors(executor.network.get_params()))
    out["inference batch 1"] = digest(executor.inference({"input": batch["input"][:1]})["output"])

    # LeNet-5's Gemm layers: NumPy's multi-threaded BLAS gave different bits at 1 and 4 threads here.
    lenet = reference.from_model(d5.models.lenet5())
    lenet.inference_and_backprop({"input": rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
                                  "label": rng.integers(0, 10, 64).astype(np.int64)})
    out["lenet5 gradients"] = digest(*lenet.network.fetch_tensors([g for _, g in lenet.network.gradient("loss")]))
    print(json.dumps(out))
""")


def run_with_threads(threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("OPENBLAS_NUM_THREADS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results() -> dict[int, dict]:
    return {threads: run_with_threads(threads) for threads in THREAD_COUNTS}


def test_each_thread_count_ran_with_that_many_threads(results):
    assert {threads: result["threads"] for threads, result in results.items()} == {t: t for t in THREAD_COUNTS}


def test_repeated_kernel_calls_give_one_result(results):
    for threads, result in results.items():
        for key, digests in result.items():
            if key.startswith("conv"):
                assert len(digests) == 1, f"{key} at {threads} threads: {len(digests)} distinct results"


def test_results_are_bitwise_identical_across_thread_counts(results):
    reference_result = dict(results[1], threads=None)
    for threads, result in results.items():
        assert dict(result, threads=None) == reference_result, f"{threads} threads differ from 1 thread"

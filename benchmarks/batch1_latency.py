"""Batch-1 inference latency of MobileNet v1 (224x224) on the reference framework, call after call: the
figure of issue 7's thread-policy item (consecutive calls used to jump 4x, 280-854 ms, when d5._C's OpenMP
threads and OpenBLAS's threads fought over the same cores).

Each configuration runs in its own worker process (thread settings are read when the runtimes load), all
workers alternating rounds so that a noisy neighbour slows every configuration alike:

- ``d5`` -- the default thread policy (d5's OpenMP threads do all kernel work, BLAS single-threaded inside
  the kernels, NumPy's BLAS for Gemm);
- ``one thread`` -- everything single-threaded (``OMP_NUM_THREADS=1``), the floor a stable policy must beat
  or match on 2 cores;
- ``onnxruntime`` -- the same exported model in onnxruntime (the peer).

Reported per configuration: median, p90, and the spread max/min over the calls of a round (1.0 = every
call took the same time).

    python benchmarks/batch1_latency.py --calls 40 --rounds 3 --output results/batch1_latency.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from d5.bench.results import write_result
from d5.bench.stats import compare, summarize

WORKER = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    calls, model_path, runtime = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if runtime == "onnxruntime":
        import onnxruntime as ort
        session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        run = lambda: session.run(["output"], {"input": x, "label": np.zeros(1, np.int64)})
    else:
        import d5
        from d5.frameworks import reference
        executor = reference.from_model(d5.Network.from_onnx(model_path))
        run = lambda: executor.inference({"input": x})
    for _ in range(3):
        run()
    for line in sys.stdin:  # one round per line from the driver
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)
""")

CONFIGURATIONS = {
    "d5": ("reference", {}),
    "one thread": ("reference", {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}),
    "onnxruntime": ("onnxruntime", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="consecutive calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="results/batch1_latency.json")
    parser.add_argument("--model", help="an ONNX file to time instead of the zoo's MobileNet v1 (e.g. saved by "
                                        "this d5 for an older d5 to load)")
    args = parser.parse_args()

    import d5

    with tempfile.TemporaryDirectory() as tmp:
        model_path = args.model or str(Path(tmp) / "mobilenet_v1.onnx")
        if not args.model:
            d5.save_onnx(d5.models.mobilenet_v1(), model_path)
        workers = {}
        for name, (runtime, env) in CONFIGURATIONS.items():
            worker_env = {key: value for key, value in os.environ.items()
                          if key not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
            workers[name] = subprocess.Popen([sys.executable, "-c", WORKER, str(args.calls), model_path, runtime],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                             env={**worker_env, **env})
        times: dict[str, list[float]] = {name: [] for name in workers}
        spreads: dict[str, list[float]] = {name: [] for name in workers}
        for _ in range(args.rounds):
            for name, worker in workers.items():  # one worker at a time: they never share the cores
                time.sleep(1.0)  # let the previous worker's thread pools (onnxruntime's spin) fall asleep
                worker.stdin.write("go\n")
                worker.stdin.flush()
                round_times = json.loads(worker.stdout.readline())
                times[name] += round_times
                spreads[name].append(max(round_times) / min(round_times))
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()

    figures: dict = {"model": "mobilenet_v1 (3x224x224, batch 1)", "calls_per_round": args.calls,
                     "rounds": args.rounds}
    for name in workers:
        summary = summarize(times[name])
        p90 = float(np.percentile(times[name], 90))
        print(f"{name:12s} median {summary.median * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms  "
              f"max/min within a round {max(spreads[name]):.2f}")
        figures[name] = {"seconds": summary, "p90_seconds": p90, "max_over_min_per_round": spreads[name]}
    figures["d5_latency_over_one_thread"] = compare(times["d5"], times["one thread"])
    figures["d5_latency_over_onnxruntime"] = compare(times["d5"], times["onnxruntime"])
    print(f"d5 / one thread: {figures['d5_latency_over_one_thread']}; "
          f"d5 / onnxruntime: {figures['d5_latency_over_onnxruntime']}")
    print(f"wrote {write_result(args.output, 'batch1_latency', figures)}")


if __name__ == "__main__":
    main()

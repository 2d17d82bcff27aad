"""A full disk while writing a result or a report (simulated by a file-size limit in a child process): the write
fails, no truncated or temporary file is left, and what was there before is intact."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from d5.bench.results import read_result, write_result


def run_limited(script: str, limit: int) -> subprocess.CompletedProcess:
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120)


def test_a_result_that_does_not_fit_leaves_the_old_one(tmp_path):
    path = tmp_path / "result.json"
    write_result(path, "small", {"x": 1.0}, environment={})
    done = run_limited(f"""
        from d5.bench.results import write_result
        write_result({str(path)!r}, "big", {{"samples": list(range(200_000))}}, environment={{}})
    """, limit=50_000)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert read_result(path)["name"] == "small"
    assert os.listdir(tmp_path) == ["result.json"]


def test_a_report_that_does_not_fit_leaves_complete_files_or_none(tmp_path):
    results = tmp_path / "results"
    for index in range(3):
        write_result(results / f"r{index}.json", "gemm", {"gflops": 100.0 + index}, environment={})
    output = tmp_path / "report"
    done = run_limited(f"""
        from d5.bench.report import write_report
        write_report([{str(results)!r}], {str(output)!r})
    """, limit=1_200)  # report.md (~1.1 kB) fits, report.html (~1.4 kB) does not
    assert done.returncode != 0 and "File too large" in done.stderr
    leftovers = [name for name in os.listdir(output) if name.startswith(".") or name.endswith(".tmp")] \
        if output.exists() else []
    assert leftovers == []
    for name in os.listdir(output) if output.exists() else []:  # whatever was written is whole
        path = output / name
        if name.endswith(".md") or name.endswith(".html"):
            text = path.read_text()
            assert "gemm" in text and (not name.endswith(".html") or text.rstrip().endswith("</html>"))
        if name.endswith(".png"):
            assert path.read_bytes().endswith(b"IEND\xaeB`\x82")

"""d5 report: result JSONs of real runs of a tiny recipe -> report.md and report.html with the tables (checked
against numpy on the runs' own numbers), the plots (real PNGs, embedded in the HTML), the environment; files of
another d5 refused with a message naming file and versions, never a KeyError; atomic output."""
from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from d5.bench.report import write_report
from d5.bench.results import read_result, write_result
from d5.cli import main
from d5.errors import D5Error

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "recipes" / "tiny_mlp_recipe.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Runs of the tiny recipe over batch sizes 16, 32 (threads 1) and threads 1, 2 (batch 16), 3 seeds each,
    plus a benchmark result and a sweep manifest; in-process, about 3 s."""
    folder = tmp_path_factory.mktemp("results")
    for batch, threads in ((16, 1), (32, 1), (16, 2)):
        for seed in range(3):
            out = folder / "runs" / f"b{batch}-t{threads}-s{seed}.json"
            assert main(["run", str(TINY), "--batch-size", str(batch), "--threads", str(threads), "--seed", str(seed),
                         "--json", str(out)]) in (0, 1)
    write_result(folder / "gemm.json", "gemm", {"gflops": {"median": 150.5}}, environment={"hostname": "other"})
    write_result(folder / "sweep.json", "sweep", {}, environment={},
                 extra={"sweep_format": 1, "complete": True, "recipe": {"path": str(TINY)}, "seeds": 3,
                        "grid": {"batch_size": ["16", "32"]}, "runs": [{"status": "done"}, {"status": "failed"}]})
    (folder / "logger.json").write_text(json.dumps({"epochs": [1, 2]}))  # some other program's JSON
    return folder


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    output = tmp_path_factory.mktemp("report")
    written = write_report([results], output)
    return output, written


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_report_files_are_written_and_the_plots_are_real_pngs(report):
    output, written = report
    names = sorted(p.name for p in written)
    assert names == ["report.html", "report.md", "tiny_mlp_recipe-accuracy-vs-time.png",
                     "tiny_mlp_recipe-speed-vs-batch-size.png", "tiny_mlp_recipe-speed-vs-threads.png"]
    assert sorted(p.name for p in output.iterdir()) == names  # and nothing else (no temporary files)
    for path in written:
        if path.suffix == ".png":
            assert png_size(path.read_bytes()) == (640, 400)
    markdown = (output / "report.md").read_text()
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", markdown):
        assert (output / link).is_file()  # relative links that resolve


def test_the_html_page_is_self_contained(report):
    output, _ = report
    page = (output / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    sources = re.findall(r'src="([^"]+)"', page)
    assert len(sources) == 3 and all(src.startswith("data:image/png;base64,") for src in sources)
    embedded = base64.b64decode(sources[0].split(",", 1)[1])
    assert embedded == (output / "tiny_mlp_recipe-accuracy-vs-time.png").read_bytes()
    assert "<table>" in page and "<script" not in page and "http" not in page.split("<body>")[1]


def test_the_point_table_holds_the_median_and_ci_of_the_runs(report, results):
    output, _ = report
    markdown = (output / "report.md").read_text()
    for batch, threads in ((16, 1), (32, 1), (16, 2)):
        documents = [read_result(results / "runs" / f"b{batch}-t{threads}-s{seed}.json") for seed in range(3)]
        accuracy = [d["figures"]["TestAccuracy"]["value"] for d in documents]
        speed = [d["figures"]["Throughput"]["value"] for d in documents]
        (row,) = [line for line in markdown.splitlines() if line.startswith(f"| batch_size={batch},threads={threads} ")]
        row = cells(row)
        assert f"{np.median(accuracy):.4g} [{min(accuracy):.4g}, {max(accuracy):.4g}] (range)" in row
        assert any(cell.startswith(f"{np.median(speed):.4g} [") for cell in row)
        # MLPerf: with 3 runs, the best and the worst are dropped and the middle one remains.
        median_column = [c for c in row if c.endswith("(range)")][0]
        assert row[row.index(median_column) + 1] == f"{np.sort(accuracy)[1]:.4g}"
        assert row[1:4] == ["3", "0,1,2", str(sum(not d["extra"]["passed"] for d in documents))]


def test_the_report_lists_runs_sweeps_other_results_environment_and_skipped_files(report, results):
    output, _ = report
    markdown = (output / "report.md").read_text()
    assert "9 recipe runs of 1 recipes, 1 sweeps, 1 other results." in markdown
    assert "| gemm   |" in markdown and "gflops=150.5" in markdown
    (sweep,) = [line for line in markdown.splitlines() if "sweep.json" in line]
    assert cells(sweep)[1:] == ["tiny_mlp_recipe.py", "batch_size=16,32", "3", "1", "1", "yes"]
    environment = read_result(results / "runs" / "b16-t1-s0.json")["environment"]
    assert environment["hostname"] in markdown and environment["cpu"]["model"] in markdown
    assert "environment 2 (1 results)" in markdown  # gemm's, from another host
    assert "## Skipped files" in markdown and "logger.json (not a d5 result)" in markdown
    assert "resource use (no memory or CPU-utilization metric was measured)" in markdown


def test_a_resource_metric_gets_its_plot(results, tmp_path):
    source = results / "runs" / "b16-t1-s0.json"
    document = json.loads(source.read_text())
    document["figures"]["PeakMemory"] = {"metric": "PeakMemory", "value": 312.5, "unit": "MiB", "threshold": None,
                                         "met": True, "higher_is_better": False}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "run.json").write_text(json.dumps(document))
    written = write_report([tmp_path / "in"], tmp_path / "out")
    assert "tiny_mlp_recipe-PeakMemory.png" in [p.name for p in written]
    # One point, one batch size, one thread count: nothing to plot speed against, and the page says so.
    assert "speed against batch size; speed against threads" in (tmp_path / "out" / "report.md").read_text()


def copy_with(results: Path, tmp_path: Path, edit) -> Path:
    document = json.loads((results / "runs" / "b16-t1-s0.json").read_text())
    edit(document)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d.update(schema_version=2), "has schema_version 2, but this d5 reads versions up to 1"),
    (lambda d: d["extra"].pop("recipe_format"), "is a recipe result of an older d5 (recipe_format 0), but this d5 "
                                                "reads recipe_format 1"),
    (lambda d: d["extra"].update(recipe_format=2), "is a recipe result of a newer d5 (recipe_format 2), but this d5 "
                                                   "reads recipe_format 1; upgrade d5"),
    (lambda d: d["extra"].update(argv=5), "does not have the layout its version promises (TypeError"),
    (lambda d: d["extra"].update(recipe="garbage"), "does not have the layout its version promises"),
], ids=["newer schema", "older recipe format", "newer recipe format", "bad argv", "bad recipe"])
def test_a_result_of_another_d5_is_refused_naming_the_file_and_the_versions(results, tmp_path, edit, expected):
    path = copy_with(results, tmp_path, edit)
    with pytest.raises(D5Error) as info:
        write_report([results / "runs", path], tmp_path / "out")
    assert str(path) in str(info.value) and expected in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_cli_reports_refusals_with_exit_status_2(results, tmp_path, capsys):
    path = copy_with(results, tmp_path, lambda d: d.update(schema_version=5))
    assert main(["report", str(path), "--output", str(tmp_path / "out")]) == 2
    assert f"d5: error: result file {path} has schema_version 5" in capsys.readouterr().err
    assert main(["report", str(results / "logger.json"), "--output", str(tmp_path / "out")]) == 2
    assert "is not a d5 result" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--output", str(tmp_path / "out")]) == 2
    assert "no d5 result files under" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")]) == 2
    assert "is neither a result file nor a directory" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    assert main(["report", str(results / "gemm.json"), "--output", str(tmp_path / "a_file")]) == 2
    assert "is a file; name a directory" in capsys.readouterr().err
    assert main(["report", str(results / "gemm.json"), "--output", str(tmp_path / "ok")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "ok" / "report.md"), str(tmp_path / "ok" / "report.html")]


def test_a_failed_report_leaves_the_previous_one_intact_and_no_temporary_files(results, tmp_path, monkeypatch):
    from d5.bench import report_page

    output = tmp_path / "out"
    write_report([results / "gemm.json"], output)
    before = {p.name: p.read_bytes() for p in output.iterdir()}
    (output / ".report.md.dead1234.tmp").write_text("half a report of a killed d5 report")

    def broken(self, title):
        raise RuntimeError("disk full")
    monkeypatch.setattr(report_page.Page, "html", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_report([results], output)
    assert {p.name: p.read_bytes() for p in output.iterdir()} == before

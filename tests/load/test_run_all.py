"""benchmarks/run_all.py: discovery, adapters, the table block of docs/benchmarks.md, and a real quick run of the engine rows."""
from __future__ import annotations

import pytest

from benchmarks import run_all
from benchmarks.report import table
from tests.helpers import ROOT


def test_discovers_every_bench_module_and_the_load_modules():
    names = run_all.bench_modules()
    on_disk = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert names[: len(on_disk)] == on_disk
    assert names[len(on_disk):] == ["threads", "ws_load", "browser_load", "soak"]
    for n in names:  # each one has a way to be run with `quick`
        assert callable(run_all.runner(n))


def test_write_docs_replaces_only_the_block(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# X\n\n## The full run\n\nintro\n\n<!-- bench:start -->\nold\n<!-- bench:end -->\n\n## Next\nkeep\n")
    rows = [dict(benchmark="b", metric="m", app=1.0, bare=2.0, ratio=0.5, target="≤ 1×", ok=True)]
    run_all.write_docs(run_all.block("machine X", table(rows), quick=False), doc)
    s = doc.read_text()
    assert "old" not in s and "intro" in s and s.endswith("## Next\nkeep\n")
    assert "| b | m | 1 | 2 | 0.5× | ≤ 1× ✓ |" in s and "machine X" in s
    assert s.count("<!-- bench:start -->") == 1 and s.count("<!-- bench:end -->") == 1
    doc.write_text("no markers")
    with pytest.raises(SystemExit):
        run_all.write_docs("x", doc)


def test_the_table_lives_in_docs_benchmarks_under_the_full_run():
    assert run_all.DOC == ROOT / "docs" / "benchmarks.md"
    s = run_all.DOC.read_text()
    i, a, b = s.index("## The full run"), s.index("<!-- bench:start -->"), s.index("<!-- bench:end -->")
    assert i < a < b and "\n## " not in s[i + 3:a]
    assert "bench:start" not in (ROOT / "README.md").read_text()  # the README links to the table


def test_write_docs_flag_writes_the_run_into_the_doc(tmp_path, monkeypatch, capsys):
    """`--write-docs` puts this run's machine info and rows into DOC; without the flag DOC stays."""
    doc = tmp_path / "benchmarks.md"
    original = "intro\n<!-- bench:start -->\nold\n<!-- bench:end -->\nafter\n"
    doc.write_text(original)
    monkeypatch.setattr(run_all, "DOC", doc)
    monkeypatch.setattr(run_all, "machine_info", lambda: "machine Y")
    monkeypatch.setattr(run_all, "run_all", lambda quick, only, skip: (
        [dict(benchmark="b", metric="m", app=3.0, bare=None, ratio=None, target="", ok=None)], []))
    assert run_all.main(["--only", "bench_engine"]) == 0
    assert doc.read_text() == original
    assert run_all.main(["--only", "bench_engine", "--write-docs"]) == 0
    s = doc.read_text()
    assert "old" not in s and "machine Y" in s and "| b | m | 3 | – | – |  |" in s
    assert s.startswith("intro\n<!-- bench:start -->") and s.endswith("<!-- bench:end -->\nafter\n")


def test_a_failing_module_becomes_an_error_row(monkeypatch):
    def boom(name):
        raise RuntimeError("no server")
    monkeypatch.setattr(run_all, "runner", boom)
    rows, failed = run_all.run_all(quick=True, only=["ws_load"])
    assert failed == ["ws_load"] and rows[0]["ok"] is False and "no server" in rows[0]["metric"]


def test_quick_engine_rows_are_real_numbers():
    import torch
    torch.set_num_threads(1)
    rows, failed = run_all.run_all(quick=True, only=["bench_engine"])
    assert failed == []
    ratios = [r for r in rows if r["bare"] is not None]
    assert len(ratios) == 4 and all(r["app"] > 0 and r["bare"] > 0 for r in ratios)
    assert all(abs(r["ratio"] - r["app"] / r["bare"]) < 1e-9 for r in ratios)
    assert "| engine: traced vs untraced" in table(rows)


def test_reference_bare_app_draws_as_many_heatmaps_as_the_heads_page(monkeypatch):
    """ws_load's reported reference (the bare app with BARE_APP_PANELS) must match the heads page
    the app opens with: as many heatmaps as the default model has heads."""
    from streamlit.testing.v1 import AppTest

    from benchmarks import ws_load
    from tests.helpers import app_test, figures

    at = app_test()
    at.run()
    app_heatmaps = [t for t in figures(at)[0]["data"] if t["type"] == "heatmap"]
    assert ws_load.default_heads() == len(app_heatmaps) == 4

    monkeypatch.setenv("BARE_APP_PANELS", str(ws_load.default_heads()))
    bare = AppTest.from_file(str(ROOT / "benchmarks" / "bare_app.py"), default_timeout=60)
    bare.run()
    assert not bare.exception
    assert [t["type"] for t in figures(bare)[0]["data"]] == ["heatmap"] * 4
    monkeypatch.delenv("BARE_APP_PANELS")
    bare.run()
    assert [t["type"] for t in figures(bare)[0]["data"]] == ["heatmap"]  # the baseline: one heatmap

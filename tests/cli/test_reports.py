"""python -m autopar.cli.reports: the generated reports are compared with what their command
writes today (.ci/run runs every report; the cheap ones run here)."""

from __future__ import annotations

from autopar.cli import reports


def test_ci_summary_and_docs_are_current():
    assert reports.stale_files(["ci", "docs"]) == []


def test_a_checkout_location_is_not_a_difference(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"sources": ["/work/one/calibration/data/nccl/x.txt", "calibration/data/y.yaml"]}\n')
    b.write_text('{"sources": ["/home/ci/autopar/calibration/data/nccl/x.txt", "calibration/data/y.yaml"]}\n')
    assert reports._same(a, b)
    b.write_text('{"sources": ["/home/ci/autopar/calibration/data/nccl/z.txt", "calibration/data/y.yaml"]}\n')
    assert not reports._same(a, b)

"""The Mask lab page (AppTest): one CSV, no repeated captions."""
from __future__ import annotations



from tests.helpers import figures, open_page


def test_mask_lab_has_one_csv_and_no_repeated_captions():
    """'the mask lab is about 6,000 px tall with 12 "CSV of these numbers" buttons and 12 identical
    "Heatmap: … exact values in the CSV below." captions'."""
    at = open_page("pages/mask-lab.py")
    assert len(at.get("download_button")) <= 2
    caps = [c.value for c in at.caption]
    assert not any("exact values in the CSV below" in c for c in caps)
    assert len(caps) == len(set(caps))  # no caption twice
    assert len(figures(at)) <= 8

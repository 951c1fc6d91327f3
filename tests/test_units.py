"""labels/units.py: the app's one convention for sizes in bytes (binary units; issue 33)."""
import pytest

from labels.units import MIB, byte_unit, human_bytes


@pytest.mark.parametrize("n, text", [(0, "0 B"), (512, "512 B"), (1023, "1,023 B"), (1024, "1.0 KiB"),
                                     (1536, "1.5 KiB"), (46_080 * 2048, "90.0 MiB"), (3 * 2**30, "3.0 GiB"),
                                     (5 * 2**40, "5.0 TiB"), (2**50, "1,024.0 TiB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_byte_unit_is_the_unit_human_bytes_writes_in():
    u = byte_unit(46_080 * 2048)
    assert (u.name, u.size) == ("MiB", MIB) and u.of(46_080 * 2048) == pytest.approx(90.0)
    assert byte_unit(1000).name == "B" and byte_unit(2048).name == "KiB"
    assert human_bytes(603_979_776, digits=0) == "576 MiB"

"""run/pages.py: numpy's huge-page advice switched off inside small_pages and restored after."""

from __future__ import annotations

import numpy as np
import pytest

from parbpe.run import pages


def _advice() -> bool:
    """numpy's huge-page advice as it stands (set back as it was)."""
    switch = pages._advice_switch()
    was = switch(False)
    switch(was)
    return bool(was)


@pytest.fixture()
def switch(monkeypatch):
    """numpy's switch, the advice on, on a machine whose free pages are reported to a host."""
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    monkeypatch.setattr(pages, "free_pages_reported", lambda: True)
    switch = pages._advice_switch()
    if switch is None:
        pytest.skip("this numpy has no huge-page advice")
    was = switch(True)
    yield switch
    switch(was)


def test_the_advice_is_off_inside_and_back_after(switch):
    with pages.small_pages() as switched:
        assert switched and not _advice()
        np.ones(1 << 20)  # arrays are made as usual
    assert _advice()


def test_the_advice_is_back_after_an_error(switch):
    with pytest.raises(RuntimeError, match="inside"):
        with pages.small_pages():
            raise RuntimeError("inside")
    assert _advice()


def test_an_advice_the_user_set_is_kept(switch, monkeypatch):
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    with pages.small_pages() as switched:
        assert not switched and _advice()
    assert _advice()


def test_a_numpy_without_the_switch_is_left_alone(monkeypatch):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    monkeypatch.setattr(pages, "_advice_switch", lambda: None)
    with pages.small_pages() as switched:
        assert not switched


def test_nothing_is_switched_where_free_pages_stay_in_the_machine(switch, monkeypatch):
    monkeypatch.setattr(pages, "free_pages_reported", lambda: False)
    with pages.small_pages() as switched:
        assert not switched and _advice()


def _device(root, name: str, kind: str, features: str) -> None:
    (root / name).mkdir()
    (root / name / "device").write_text(kind + "\n")
    (root / name / "features").write_text(features + "\n")


@pytest.mark.parametrize("devices, reported", [
    ([], False),
    ([("virtio0", "0x0005", "0110010100000000")], True),  # a balloon with bit 5 (reporting)
    ([("virtio0", "0x0005", "0110000100000000")], False),  # a balloon without it
    ([("virtio0", "0x0001", "0110010100000000"), ("virtio1", "0x0005", "01100")], False),  # a network card's bit 5
    ([("virtio0", "0x0001", "1"), ("virtio1", "0x0005", "000001")], True),
])
def test_free_page_reporting_is_read_from_the_balloons_feature_bits(tmp_path, monkeypatch, devices, reported):
    for device in devices:
        _device(tmp_path, *device)
    (tmp_path / "virtio9").mkdir()  # a device without its files is passed over
    monkeypatch.setattr(pages, "VIRTIO_DEVICES", str(tmp_path))
    pages.free_pages_reported.cache_clear()
    try:
        assert pages.free_pages_reported() is reported
    finally:
        pages.free_pages_reported.cache_clear()


def test_no_virtio_devices_report_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "VIRTIO_DEVICES", str(tmp_path / "missing"))
    pages.free_pages_reported.cache_clear()
    try:
        assert not pages.free_pages_reported()
    finally:
        pages.free_pages_reported.cache_clear()

"""numpy's large arrays in small pages for a stretch of a run (small_pages).

numpy advises the kernel to back every array of 4 MB or more with huge pages (madvise
MADV_HUGEPAGE), which makes memory faster to touch where the huge pages are at hand. In a virtual
machine whose memory balloon reports free memory to the host (virtio-balloon's free page reporting,
as on the machine parbpe's results were measured on), every free block of 2 MB or more that stays free
for two seconds goes back to the host, so a huge page taken after the machine idled faults on the
host as well: such huge pages are several times slower to touch than small pages (taken from the
fragments the host never got), which cost the same either way. SuperBPE's stage 2 allocates over a
GB (counts, encoding, engine) after its parent waited for the count beside it, so on such a machine
it allocates in small pages. Elsewhere huge pages are at hand (and faster to touch than small ones
while warm), so numpy's advice stands.

The advice is numpy's own switch (what NUMPY_MADVISE_HUGEPAGE sets at import), global to the
process: small_pages sets it for its block and restores it after; a user who set
NUMPY_MADVISE_HUGEPAGE keeps what they set.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import numpy as np

_ENV = "NUMPY_MADVISE_HUGEPAGE"
VIRTIO_DEVICES = "/sys/bus/virtio/devices"  # Linux's virtio devices: each has its device id and feature bits
_BALLOON, _REPORTING = "0x0005", 5  # a memory balloon's device id; its feature bit of free page reporting


@functools.lru_cache(maxsize=1)
def free_pages_reported() -> bool:
    """Whether a virtio memory balloon of this machine reports free pages to its host (its
    VIRTIO_BALLOON_F_REPORTING feature; the features file is one character a bit, bit 0 first)."""
    try:
        devices = sorted(os.listdir(VIRTIO_DEVICES))
    except OSError:
        return False
    for device in devices:
        try:
            with open(os.path.join(VIRTIO_DEVICES, device, "device")) as kind, \
                    open(os.path.join(VIRTIO_DEVICES, device, "features")) as features:
                if kind.read().strip() == _BALLOON and features.read().strip()[_REPORTING:_REPORTING + 1] == "1":
                    return True
        except OSError:
            continue
    return False


def _advice_switch():
    """numpy's setter of its huge-page advice (it returns the previous setting), or None if this numpy has none."""
    for module in ("_core", "core"):  # numpy 2, then 1.x
        multiarray = getattr(getattr(np, module, None), "multiarray", None)
        switch = getattr(multiarray, "_set_madvise_hugepage", None)
        if switch is not None:
            return switch
    return None


@contextlib.contextmanager
def small_pages() -> Iterator[bool]:
    """numpy's arrays made inside the block without the huge-page advice where free pages are reported
    to a host, unless NUMPY_MADVISE_HUGEPAGE is set (then as it says); yields whether the advice was
    switched off here."""
    switch = _advice_switch() if os.environ.get(_ENV) is None and free_pages_reported() else None
    if switch is None:
        yield False
        return
    was = switch(False)
    try:
        yield True
    finally:
        switch(was)

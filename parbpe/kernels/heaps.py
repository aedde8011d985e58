"""A binary min-heap of int64 entries in an array, for kernels: the merges of a chunk or piece taken
in rank order (kernels/segment.py's merges_kernel, kernels/encode.py's pieces), an entry being
rank << 32 | position. Entries equal in value are interchangeable, so the order of pops is the
order of the values whatever the heap's layout.
"""

from __future__ import annotations

from ..jit import helper


@helper
def push(heap, size, entry):
    """Put entry into the heap heap[:size] (heap has room for it); returns the new size."""
    p = size
    while p > 0 and heap[(p - 1) >> 1] > entry:
        heap[p] = heap[(p - 1) >> 1]
        p = (p - 1) >> 1
    heap[p] = entry
    return size + 1


@helper
def pop(heap, size):
    """Take the least entry out of the heap heap[:size] (size > 0): (that entry, the new size)."""
    entry = heap[0]
    size -= 1
    moved = heap[size]
    p = 0
    child = 1
    while child < size:
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= moved:
            break
        heap[p] = heap[child]
        p = child
        child = 2 * p + 1
    heap[p] = moved
    return entry, size

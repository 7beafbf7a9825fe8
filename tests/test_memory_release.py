"""The trainer hands the allocator's free pages back at each report: RSS follows the live memory."""

import psutil
import torch

from trainables.memory import _malloc_trim, release_free_memory


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def test_free_pages_held_by_malloc_go_back_to_the_os():
    if _malloc_trim() is None:
        assert release_free_memory() is False  # nothing to ask: a no-op that says so
        return
    release_free_memory()
    # 128 MiB in 64 KiB tensors (below malloc's mmap threshold: they live on its heap), touched; then
    # every other one freed, the last kept, so free() alone cannot shrink the heap from its top
    blocks = [torch.ones(16384) for _ in range(2048)]
    del blocks[::2]
    held = _rss_mib()
    assert release_free_memory() is True
    after = _rss_mib()
    assert held - after > 40, (held, after)  # ~64 MiB of free 64 KiB holes: their whole pages went back
    assert all(float(b[0]) == 1.0 for b in blocks[::128])  # the live tensors are untouched

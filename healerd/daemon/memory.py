"""glibc's malloc, told to hand large buffers back to the kernel when they are freed.

Each look at the engine decodes its whole list at once (about 1.5 MiB of JSON at 1,000
containers, twice that as Python objects). glibc serves a block that large with mmap at
first, but after the first such block is freed it raises its mmap threshold to that size
("dynamic threshold"), and from then on serves those blocks from the heap, where they
stay as fragmented free space: healerd's RSS at 1,000 containers was 24 MiB over its
imports, most of it that. A fixed threshold (glibc's own initial 128 KiB) keeps them in
mmap, returned at each free; it costs one mmap/munmap pair per large block.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("healerd.memory")

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD = 128 * 1024


def keep_large_blocks_in_mmap() -> bool:
    """Fix glibc's mmap threshold, unless the operator set one (MALLOC_MMAP_THRESHOLD_);
    False where there is no glibc mallopt (musl) or it refused."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    log.debug("malloc mmap threshold fixed at %d bytes: %s", MMAP_THRESHOLD, done)
    return done


__all__ = ["keep_large_blocks_in_mmap"]

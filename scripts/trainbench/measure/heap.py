"""The garbage collector during timed work: the set-up's objects frozen.

A process that has imported torch (and transformers) holds ~200,000 objects the cyclic
collector tracks; a full collection of them takes ~0.15 s on a 2-core VM. Inside a
timed step that is a spike no device caused. ``frozen_heap`` moves every object alive
before the first step to the collector's permanent generation (``gc.freeze``), so no
collection inside a timed region ever traverses them; the objects made by training are
collected as usual. The record names it (``settings.garbage_collection``).
"""

from __future__ import annotations

import gc

GC_METHOD = (
    "gc.collect() then gc.freeze() before step 0, gc.unfreeze() after the last timed "
    "region: the objects of imports and set-up (~200,000 with transformers loaded, a full "
    "collection of them ~0.15 s on a 2-core VM) are never traversed by a collection "
    "inside a timed step; new garbage is collected as usual"
)


class frozen_heap:
    """``with frozen_heap():`` — the set-up's objects moved to the collector's permanent
    generation for the duration (:data:`GC_METHOD`). Nested uses keep the outermost."""

    def __enter__(self) -> frozen_heap:
        self.frozen_here = gc.get_freeze_count() == 0
        if self.frozen_here:
            gc.collect()
            gc.freeze()
        return self

    def __exit__(self, *exc) -> None:
        if self.frozen_here:
            gc.unfreeze()


__all__ = ["GC_METHOD", "frozen_heap"]

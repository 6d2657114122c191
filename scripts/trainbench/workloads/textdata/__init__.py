"""Text data sources for the multi-label text workload (seed report 000).

Three sources, all returning :class:`.dataset.TextDataset` (texts plus a 0/1 label matrix):

* ``proposals`` (:mod:`.proposals`): a deterministic generator of synthetic grant/project
  proposals whose four labels are injected by explicit rules, so the ground truth is
  exact. :func:`.proposal_check.check_proposal` re-derives every label from the text
  alone (regexes over names, dates, objective numbers and banned phrases) and is what
  the tests use to prove that the labels are right. The word lists live in
  :mod:`.proposal_vocabulary`.
* ``goemotions`` (:mod:`.files`): the GoEmotions TSV files (``original``: 28 labels,
  ``ekman``: 7).
* ``table`` (:mod:`.files`): any CSV/TSV with a text column and named 0/1 label columns.

:func:`.splits.load_splits` turns the workload's ``data`` settings into a train and a
dev split.
"""

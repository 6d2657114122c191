"""Signalling a cell's process group, on Linux and macOS alike.

Every group signalled here is one trainbench created: a cell's child (spawned with
``start_new_session``, or forked by the fork server, which calls ``setsid``), whose
process-group id is the child's pid. Such a group can be gone in two ways the caller
must survive, since a timeout kill or a stop races the child's own exit:

* ``ESRCH`` (:class:`ProcessLookupError`): no process has that group id any more.
* ``EPERM`` (:class:`PermissionError`): on macOS, ``killpg`` fails with EPERM, not
  ESRCH, when the group holds only a zombie (an exited child not yet reaped): asv
  issue #304, cylc-flow issue #4221. Linux signals a zombie without complaint.

EPERM also means, on either system, "the group exists but none of its members is
ours to signal". For a group we created that is a zombie-only group (macOS), a group
id reused, after ours ended, by another user's processes, or (never seen in a cell) a
last member that became another user by exec'ing a setuid program: in every case our
cell has ended or is beyond our signals, and waiting would change nothing. So EPERM
counts as gone *here*, and only here: a probe of an arbitrary pid (is the launcher
that holds a lock alive?) must read EPERM as "a process exists" (see
:func:`trainbench.launch.cell_lock._alive`).
"""

from __future__ import annotations

import os


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pgid``, a group this package created (0
    probes it). Returns whether the group was still there: False when it is gone (ESRCH)
    or holds nothing of ours (EPERM: macOS's answer for a zombie-only group). Other
    errors (EINVAL: no such signal) are raised."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True

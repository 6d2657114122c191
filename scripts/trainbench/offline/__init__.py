"""Offline install for a machine without network (docs/offline-install.md).

Where the network is, ``wheelhouse`` resolves the pinned requirements of
pyproject.toml for the target's Python and platform and downloads only the wheels
the target lacks (or has at another version), with a manifest saying why each is
there. On the target, ``install`` makes the project's .venv over the machine's own
interpreter (its torch and CUDA stack stay the machine's), installs the wheelhouse
with ``--no-index`` and checks the result.

Modules: ``requirements`` (pins, extras, freeze files), ``selection`` (what goes in
the wheelhouse), ``wheelhouse`` (pip runs where the network is), ``venv`` (the
install on the target, standard library only), ``check`` (what the new venv runs),
``cli`` (the sub-commands of scripts/offline_install.py).
"""


class OfflineError(RuntimeError):
    """Bad input or a step that cannot go on; the message says which and the fix."""

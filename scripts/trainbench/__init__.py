"""trainbench: reproducible, honestly timed training benchmarks (docs/configuration.md).

The public surface is what ``__all__`` names: what your own model's ``build(ctx)``
needs (docs/configuration.md, "Your own model"). **Names in ``__all__`` keep working
across minor versions; every other module (``trainbench.measure.*``,
``trainbench.launch.*``, ``trainbench.config.*`` ...) is internal and may move.** Each
name is imported when first used, so ``import trainbench`` stays cheap for scripts that
never touch torch.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~6 ms)
if TYPE_CHECKING:
    from typing import Any

    from trainbench.measure.context import DeviceUnavailable, RunContext
    from trainbench.measure.data import BatchTensorDataset, make_loader, to_device
    from trainbench.measure.parts import TrainingParts

# Public name -> the internal module that defines it (moves are made here, not by users).
_PUBLIC = {
    "TrainingParts": "trainbench.measure.parts",
    "RunContext": "trainbench.measure.context",
    "DeviceUnavailable": "trainbench.measure.context",
    "BatchTensorDataset": "trainbench.measure.data",
    "make_loader": "trainbench.measure.data",
    "to_device": "trainbench.measure.data",
}

__all__ = [
    "BatchTensorDataset",
    "DeviceUnavailable",
    "RunContext",
    "TrainingParts",
    "__version__",
    "make_loader",
    "to_device",
]


def __getattr__(name: str) -> "Any":
    if name == "__version__":
        from trainbench.common.code_identity import package_version

        value: Any = package_version()
    elif name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    else:
        raise AttributeError(f"module 'trainbench' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted((set(globals()) - {"TYPE_CHECKING"}) | set(__all__))

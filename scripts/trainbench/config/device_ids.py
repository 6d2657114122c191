"""The one grammar of device ids, parsed and formatted here and nowhere else.

    cpu | mps | cuda                         a backend (a column of the matrix)
    cpu-t4                                   the CPU with 4 threads
    cuda-compile, cuda-compile-reduce-overhead   torch.compile (default mode, or a mode)
    mps+cpu-fallback                         a run in which MPS fell back to the CPU
    cuda@NVIDIA H100 80GB HBM3               a device on one kind of hardware, where
                                             merged results ran on several (the
                                             fallback mark may also follow it)

The matrix's columns are ids without the last two parts; records and tables may
carry them (trainbench.analysis.aggregate adds ``@hardware``, the launcher ``+cpu-fallback``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

BACKENDS = ("cpu", "mps", "cuda")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
FALLBACK = "+cpu-fallback"
_PATTERN = re.compile(
    r"^(?P<backend>cpu|mps|cuda)(?:-t(?P<threads>[1-9]\d*))?"
    r"(?P<compile>-compile(?:-(?P<mode>" + "|".join(COMPILE_MODES[1:]) + r"))?)?"
    r"(?P<fallback>\+cpu-fallback)?(?:@(?P<hardware>.+?))?(?P<fallback_end>\+cpu-fallback)?$"
)


@dataclass(frozen=True)
class DeviceId:
    backend: str
    threads: int | None = None  # CPU threads (cpu-tN); None: PyTorch's default
    compile: str | None = None  # torch.compile mode; None: eager
    fallback: bool = False  # an MPS run with CPU fallback ops
    hardware: str | None = None  # the hardware label of merged results

    @classmethod
    def parse(cls, text: str) -> DeviceId:
        match = _PATTERN.match(str(text))
        if not match or (match["threads"] and match["backend"] != "cpu"):
            raise ValueError(
                f"{text!r} is not a device id: cpu, cpu-t<N>, mps or cuda, optionally "
                "followed by -compile or -compile-<mode>"
            )
        mode = (match["mode"] or "default") if match["compile"] else None
        threads = int(match["threads"]) if match["threads"] else None
        fallback = bool(match["fallback"] or match["fallback_end"])
        return cls(match["backend"], threads, mode, fallback, match["hardware"])

    @classmethod
    def is_valid(cls, text: str) -> bool:
        try:
            cls.parse(text)
        except ValueError:
            return False
        return True

    def format(self) -> str:
        text = self.backend + (f"-t{self.threads}" if self.threads else "")
        if self.compile:
            text += "-compile" + ("" if self.compile == "default" else f"-{self.compile}")
        text += FALLBACK if self.fallback else ""
        return text + (f"@{self.hardware}" if self.hardware else "")

    @property
    def column(self) -> DeviceId:
        """The matrix column: without the fallback label and the hardware."""
        return replace(self, fallback=False, hardware=None)

    def __str__(self) -> str:
        return self.format()


def column_of(text: str) -> str:
    """The matrix column of a device label ("cuda@H100" -> "cuda"); unparsable
    labels are returned unchanged."""
    try:
        return DeviceId.parse(text).column.format()
    except ValueError:
        return str(text)


def backend_of(text: str) -> str | None:
    try:
        return DeviceId.parse(text).backend
    except ValueError:
        return None

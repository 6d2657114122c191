"""The one piece of the MPS emulator torch's Python cannot provide: a device guard and
accelerator hooks for the ``mps`` device type in a torch built without MPS.

Autograd asks every non-CPU tensor's device guard for its stream
(``torch::autograd::InputMetadata``), and accumulates gradients on the accelerator's
current stream (``at::accelerator::getCurrentStream``, which asks each backend's hooks
whether it is built). A CPU build has neither for ``mps``, so a tensor that claims to be
on ``mps`` cannot take part in a backward pass. This module compiles (once per torch
version, cached; about a second) and loads a shared library that registers both: a guard
with one device and one stream that never waits, and hooks that say "built, available"
and hand out CPU generators for ``torch.Generator(device="mps")``. Every computation still runs on the CPU (:mod:`.dispatch`).

The registration is process-wide and cannot be undone: the emulator runs in a cell's own
process, never in a process that goes on to do anything else. On a torch that has MPS
(macOS on Apple silicon) nothing is compiled: its own guard is there.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SOURCE = r"""
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/MPSHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {
using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

Stream the_stream() { return Stream(Stream::DEFAULT, Device(DeviceType::MPS, 0)); }

struct EmulatedMpsGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::MPS; }
  Device exchangeDevice(Device) const override { return Device(DeviceType::MPS, 0); }
  Device getDevice() const override { return Device(DeviceType::MPS, 0); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return the_stream(); }
  Stream getDefaultStream(Device) const override { return the_stream(); }
  Stream exchangeStream(Stream) const noexcept override { return the_stream(); }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(MPS, EmulatedMpsGuard);

struct EmulatedMpsHooks : public at::MPSHooksInterface {
  EmulatedMpsHooks() = default;
  explicit EmulatedMpsHooks(at::MPSHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  // torch.Generator(device="mps"): the emulated ops draw from CPU generators.
  const at::Generator& getDefaultGenerator(DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
};
}  // namespace

namespace at {
C10_REGISTER_CLASS(MPSHooksRegistry, MPSHooks, EmulatedMpsHooks);
}
"""


class EmulatorUnavailable(RuntimeError):
    """The emulator cannot start on this machine (no compiler, or too late in the process)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainbench"


def library_path() -> Path:
    key = hashlib.sha256(
        f"{SOURCE}{torch.__version__}{sys.platform}{torch._C._GLIBCXX_USE_CXX11_ABI}".encode()
    ).hexdigest()[:16]
    return cache_dir() / f"mps-emulator-{key}.so"


def _compiler() -> str:
    wanted = os.environ.get("CXX")
    for name in ([wanted] if wanted else []) + ["c++", "g++", "clang++"]:
        found = shutil.which(name)
        if found:
            return found
    raise EmulatorUnavailable(
        "the MPS emulator compiles a 50-line C++ shim once (a device guard for `mps` in a "
        "torch built without MPS) and found no C++ compiler (c++, g++, clang++; or set CXX). "
        "Fix: install one (Debian/Ubuntu: apt install g++; macOS: xcode-select --install)."
    )


def build() -> Path:
    """The compiled shim, from the cache or compiled now (temp file, then rename)."""
    target = library_path()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    root = Path(torch.__file__).parent
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source = Path(tmp) / "mps_emulator.cpp"
        source.write_text(SOURCE)
        out = Path(tmp) / target.name
        abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
        argv = [_compiler(), "-shared", "-fPIC", "-std=c++20", "-O1", "-w",
                f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{root / 'include'}", str(source),
                "-o", str(out), f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu",
                f"-Wl,-rpath,{root / 'lib'}"]  # fmt: skip
        if sys.platform == "darwin":
            argv[1:1] = ["-undefined", "dynamic_lookup"]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise EmulatorUnavailable(
                f"compiling the MPS emulator's shim failed ({' '.join(argv[:2])} ...): "
                f"{done.stderr.strip()[-1500:]}"
            )
        os.replace(out, target)
    return target


def check_torch() -> None:
    """Refuse a torch without ``torch.accelerator`` (feature detection, not a version
    number): the emulator stands in for that API (:mod:`.api`) and its shim overrides
    the accelerator hooks it comes with; on an older torch (2.5) the shim would fail
    to compile with a page of C++ errors instead."""
    if getattr(torch, "accelerator", None) is None:
        raise EmulatorUnavailable(
            f"this torch ({torch.__version__}) has no torch.accelerator, the API the MPS "
            "emulator stands in for (its C++ shim overrides the accelerator hooks that "
            "come with it). Fix: run the emulator under the torch pyproject.toml pins "
            "(make setup), not an older one."
        )


def register() -> str:
    """Register the guard and hooks in this process; how the device came to be."""
    check_torch()
    if torch.backends.mps.is_built():
        return "this torch's own MPS guard (built with MPS)"
    path = build()
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "mps":
        raise EmulatorUnavailable(
            "the MPS emulator's hooks were loaded after torch had already chosen its "
            f"accelerator ({accelerator}): install the emulator first thing in a fresh process"
        )
    return f"a compiled shim ({path.name}) registering an `mps` device guard and hooks"

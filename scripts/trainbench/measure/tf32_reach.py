"""Whether TF32 reaches a CUDA float32 cell's model under the settings in force: the
record's ``settings_in_force.tf32_reach``, which the evaluation's precision class reads
(:func:`trainbench.common.precision_classes.precision_of`, ``honour_reach``).

Torch's flags say what TF32 *may* compute; which ops it touches depends on the model.
PyTorch's TF32 notes: ``torch.backends.cuda.matmul.allow_tf32`` (cuBLAS matmuls, False by
default since 1.12; also set by ``torch.set_float32_matmul_precision("high")`` or
``"medium"``) and ``torch.backends.cudnn.allow_tf32`` (cuDNN's convolutions and RNNs,
True by default); ``NVIDIA_TF32_OVERRIDE=0`` switches TF32 off in both libraries. So a
model of Linear layers under the defaults runs no TF32 op, and judging its evaluation in
the TF32 class (an envelope ~280x float32's) would pass a 0.1% error. Two sources decide,
both recorded:

* **the scan** (:func:`scan`) of the model's modules: convolutions (``nn.Conv*``,
  ``nn.ConvTranspose*``) and cuDNN's RNNs (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) count when
  cuDNN's flag is on; matmul modules (``nn.Linear``, ``nn.Bilinear``, the RNN cells,
  ``nn.MultiheadAttention``'s projections) when cuBLAS's is; ``nn.MultiheadAttention`` and
  ``nn.TransformerEncoderLayer`` (their eval-mode fast path) when either is. It cannot
  see a functional op (``x @ w``, ``F.conv2d``), which an own model may use; hence
* **the probe** (:func:`probe`), on CUDA float32 cells with a TF32 flag on, after every
  timed region: the workload's own ``evaluate`` of the evaluation loader's first batch
  (eval mode, ``no_grad``, the random streams restored after it) with the flags in
  force, again with both TF32 flags off, and once more with the flags in force; each
  module's output and the evaluation's outputs are reduced on the device to a sum of
  their bits and compared. Differing with TF32 off: TF32 reached the model. The two
  passes in force differing from each other: the model's evaluation is not
  bit-reproducible and the probe cannot tell. The flags are restored in a ``finally``
  and checked; a probe that fails is recorded with its reason, never the cell's error.

**Rule** (:func:`decide`): TF32 reaches the model when the scan finds an op it reaches or
the probe's outputs differ; it reaches none when no TF32 flag is on or
``NVIDIA_TF32_OVERRIDE=0`` rules it out (unless the probe's outputs differ), or when the
scan finds none and the probe's outputs are identical. Where the scan finds none and the probe
could not tell (not reproducible, or failed), TF32 is assumed to reach the model: a
functional op cannot be ruled out, and the class stays what torch's flags give. Off
CUDA, under autocast, and in a float64 reference run nothing is decided (``reaches``
None): the flags' class stands.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from trainbench.measure import quality
from trainbench.measure.precision import matmul_facts

if TYPE_CHECKING:
    from trainbench.measure.context import RunContext
    from trainbench.measure.parts import TrainingParts

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d,
                nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)  # fmt: skip
CUDNN_RNNS = (nn.RNNBase,)  # nn.RNN, nn.LSTM, nn.GRU: cuDNN's RNN kernels on CUDA
MATMULS = (nn.Linear, nn.Bilinear, nn.RNNCellBase, nn.MultiheadAttention)
FAST_PATHS = (nn.MultiheadAttention, nn.TransformerEncoderLayer)
# (kind, module classes, which flag lets TF32 reach it: "cudnn", "cublas" or "either")
KINDS = (
    ("cuDNN convolutions", CONVOLUTIONS, "cudnn"),
    ("cuDNN RNNs", CUDNN_RNNS, "cudnn"),
    ("cuBLAS matmuls", MATMULS, "cublas"),
    ("nn.MultiheadAttention's eval fast path", FAST_PATHS, "either"),
)
PROBE_METHOD = (
    "the workload's evaluate() of the evaluation loader's first batch on the device (eval "
    "mode, no_grad), with torch's TF32 flags in force, with both off (float32 matmul "
    "precision 'highest', so torch.backends.cuda.matmul.allow_tf32 False, and "
    "torch.backends.cudnn.allow_tf32 False), and "
    "in force again; every module's output and the evaluation's outputs reduced to a sum "
    "of their bits on the device and compared; the flags restored in a finally"
)


# ----------------------------------------------------------------------------- flags


def flags_in_force(settings: Mapping) -> dict:
    """Which TF32 flags are on now (``cublas``, ``cudnn``) and whether
    ``NVIDIA_TF32_OVERRIDE=0`` rules TF32 out (``override``): torch's flags read again
    (a workload may have changed them after the cell recorded its settings), else the
    recorded ones; ``changed`` names a flag that differs from the record."""
    recorded = {
        k: settings.get(k) for k in ("tf32_matmul", "tf32_cudnn", "float32_matmul_precision")
    }
    try:
        now = matmul_facts("cuda")
    except Exception:  # a getter that raises (mixed legacy and new TF32 APIs): the record's
        now = {}
    used = {**settings, **now}
    changed = [f"{k} {recorded[k]!r} at the start, {now[k]!r} now"
               for k in recorded if k in now and now[k] != recorded[k]]  # fmt: skip
    return {
        "cublas": bool(used.get("tf32_matmul"))
        or used.get("float32_matmul_precision") in ("high", "medium"),
        "cudnn": bool(used.get("tf32_cudnn")),
        "override": str(used.get("tf32_override") or "").strip() == "0",
        "changed": changed,
    }


def flags_text(flags: Mapping) -> str:
    if flags.get("override"):
        return "NVIDIA_TF32_OVERRIDE=0 switches TF32 off in cuBLAS and cuDNN"
    state = {name: "on" if flags.get(key) else "off" for key, name in
             (("cudnn", "cuDNN"), ("cublas", "cuBLAS"))}  # fmt: skip
    if state["cuDNN"] == state["cuBLAS"]:
        return f"TF32 flags {state['cuDNN']} for cuDNN and cuBLAS"
    return f"cuDNN's TF32 flag {state['cuDNN']}, cuBLAS's {state['cuBLAS']}"


def any_flag(flags: Mapping) -> bool:
    return bool(flags.get("cublas") or flags.get("cudnn"))


# ----------------------------------------------------------------------------- scan


def scan(model: nn.Module, flags: Mapping) -> dict:
    """The model's modules TF32 can touch, per kind (:data:`KINDS`), and those it reaches
    under ``flags`` (:func:`flags_in_force`): ``found`` and ``reached``, each
    {kind: {module class: count}}, and ``modules``: the TF32-relevant modules in words."""
    found: dict[str, Counter] = {}
    modules: Counter = Counter()
    for module in model.modules():
        kinds = [kind for kind, classes, _ in KINDS if isinstance(module, classes)]
        for kind in kinds:
            found.setdefault(kind, Counter())[type(module).__name__] += 1
        if kinds:
            modules[type(module).__name__] += 1
    on = {"cudnn": bool(flags.get("cudnn")), "cublas": bool(flags.get("cublas"))}
    on["either"] = on["cudnn"] or on["cublas"]
    reached = {} if flags.get("override") else {
        kind: found[kind] for kind, _, flag in KINDS if kind in found and on[flag]
    }  # fmt: skip
    return {
        "found": {kind: dict(c) for kind, c in found.items()},
        "reached": {kind: dict(c) for kind, c in reached.items()},
        "modules": _modules_text(modules),
    }


def _modules_text(counts: Mapping[str, int]) -> str:
    if not counts:
        return "no convolution, RNN, matmul or attention module"
    names = [f"{name} ×{n}" for name, n in sorted(counts.items())]
    return ", ".join(names) + (" only" if len(names) == 1 else "")


def reached_text(reached: Mapping[str, Mapping[str, int]]) -> str:
    return "; ".join(f"{kind} ({', '.join(f'{n} ×{c}' for n, c in sorted(m.items()))})"
                     for kind, m in reached.items())  # fmt: skip


# ----------------------------------------------------------------------------- probe


class OneBatch:
    """The evaluation loader reduced to one batch; other attributes are the loader's."""

    def __init__(self, loader: Iterable, batch: Any):
        self.loader, self.batch = loader, batch

    def __iter__(self) -> Iterator:
        yield self.batch

    def __len__(self) -> int:
        return 1

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "batch"):  # not set yet (a copy): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


# torch 2.9's per-op settings (backend, op), in the order they are restored
PER_OP = (("generic", "all"), *((b, o) for b in ("cuda", "mkldnn")
                                for o in ("all", "matmul", "conv", "rnn")))  # fmt: skip


def tf32_state() -> dict:
    """Torch's TF32 settings: the legacy ones (float32 matmul precision and cuDNN's
    ``allow_tf32``) where they can be read, else (new and legacy APIs mixed, which makes
    the legacy getters raise from torch 2.9 on) every per-op ``fp32_precision``."""
    try:
        return {"api": "legacy",
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}  # fmt: skip
    except RuntimeError:
        read = torch._C._get_fp32_precision_getter
        return {"api": "per-op", **{f"{b}.{o}": read(b, o) for b, o in PER_OP}}


def restore_tf32(state: Mapping) -> None:
    """Torch's TF32 settings as :func:`tf32_state` read them, through the same API (a
    per-op setter after a legacy one would leave them mixed)."""
    if state["api"] == "legacy":
        torch.set_float32_matmul_precision(state["float32_matmul_precision"])
        torch.backends.cudnn.allow_tf32 = state["cudnn_allow_tf32"]
        return
    for b, o in PER_OP:
        torch._C._set_fp32_precision_setter(b, o, state[f"{b}.{o}"])


@contextlib.contextmanager
def tf32_off() -> Iterator[None]:
    """Both TF32 flags off inside (cuBLAS: float32 matmul precision "highest"), through
    the API :func:`tf32_state` read; restored after, even on an error, and checked
    (RuntimeError if not)."""
    saved = tf32_state()
    try:
        if saved["api"] == "legacy":  # "highest": cuBLAS's allow_tf32 False, every backend
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False
        else:
            for op in ("matmul", "conv", "rnn"):
                torch._C._set_fp32_precision_setter("cuda", op, "ieee")
        yield
    finally:
        restore_tf32(saved)
        if tf32_state() != saved:
            raise RuntimeError(f"TF32 settings not restored: {saved} -> {tf32_state()}")


def _int_view(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    t = t.contiguous()
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t if t.dtype == ints else t.view(ints)


def _shape(t: torch.Tensor) -> str:
    return "(nested)" if t.is_nested else str(tuple(t.shape))


def _tensor_digest(t: torch.Tensor) -> torch.Tensor | str:
    """The sum of ``t``'s bits as int64 on its device (a nested or sparse tensor padded or
    made dense first); a tensor that cannot be read so is named, the same in every pass."""
    try:
        if t.is_nested:
            t = t.to_padded_tensor(0)
        elif t.layout != torch.strided:
            t = t.to_dense()
        return _int_view(t).sum(dtype=torch.int64)
    except (RuntimeError, TypeError, KeyError, NotImplementedError) as exc:
        return f"not digested ({type(exc).__name__})"


def _digests(value: Any, where: str, out: list) -> None:
    """Append (where, digest) for every tensor, array and number in ``value``: a tensor's
    digest is the sum of its bits, computed on its device (read once, at the end)."""
    if isinstance(value, torch.Tensor):
        out.append((f"{where} {_shape(value)} {value.dtype}", _tensor_digest(value)))
    elif isinstance(value, Mapping):
        for key in value:
            _digests(value[key], f"{where}.{key}", out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _digests(item, f"{where}[{i}]", out)
    elif hasattr(value, "tobytes") and hasattr(value, "dtype"):  # a numpy array
        out.append((where, hashlib.blake2b(value.tobytes(), digest_size=8).hexdigest()))
    elif isinstance(value, (bool, int, float, complex, str)) or value is None:
        out.append((where, float(value).hex() if isinstance(value, float) else repr(value)))


def evaluation_digests(parts: TrainingParts, loader: Iterable, ctx: RunContext) -> list:
    """One ``evaluate`` of ``loader`` with every module's output digested as it is made
    (before an in-place op can change it) and the evaluation's outputs (or metrics)."""
    found: list = []
    names = {id(m): name or "model" for name, m in parts.model.named_modules()}

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        _digests(output, f"{names.get(id(module), '?')} ({type(module).__name__})", found)

    handles = [m.register_forward_hook(hook) for m in parts.model.modules()]
    try:
        evaluation = parts.evaluate(parts.model, loader, ctx)
    finally:
        for handle in handles:
            handle.remove()
    key = "outputs" if "outputs" in evaluation else "metrics"
    _digests(evaluation.get(key), f"evaluate()'s {key}", found)
    values = _read_digests(found)
    return [(where, values.get(i, digest)) for i, (where, digest) in enumerate(found)]


def _read_digests(found: list) -> dict[int, int]:
    """The tensor digests of ``found`` as ints, one read per device (one synchronization)."""
    by_device: dict[Any, list[int]] = {}
    for i, (_, digest) in enumerate(found):
        if isinstance(digest, torch.Tensor):
            by_device.setdefault(digest.device, []).append(i)
    values: dict[int, int] = {}
    for indices in by_device.values():
        read = torch.stack([found[i][1] for i in indices]).tolist()
        values.update(zip(indices, read, strict=True))
    return values


def first_difference(a: list, b: list) -> str | None:
    """Where two digest lists first differ (None: identical)."""
    for (where, x), (other, y) in zip(a, b, strict=False):
        if where != other or x != y:
            return where
    if len(a) != len(b):
        return f"the number of outputs ({len(a)} against {len(b)})"
    return None


def probe(parts: TrainingParts, ctx: RunContext) -> dict:
    """The probe (the module docstring): ``status`` identical, differs, not reproducible
    or error, ``first_difference``, ``reason`` and ``seconds``. Never raises."""
    started = time.perf_counter()
    found: dict[str, Any] = {"method": PROBE_METHOD}
    model = parts.model
    training = model.training
    try:
        batch = next(iter(parts.eval_loader))
        loader = OneBatch(parts.eval_loader, batch)
        model.eval()
        with quality.rng_untouched(ctx.torch_device), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the evaluation's own, already in the cell's log
            in_force = evaluation_digests(parts, loader, ctx)
            with tf32_off():
                off = evaluation_digests(parts, loader, ctx)
            again = evaluation_digests(parts, loader, ctx)
        unstable, changed = first_difference(in_force, again), first_difference(in_force, off)
        if unstable:
            found.update(status="not reproducible", first_difference=unstable)
        else:
            found.update(status="differs" if changed else "identical", first_difference=changed)
    except Exception as exc:  # never the cell's error: the reason is recorded
        found.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        model.train(training)
    found["seconds"] = time.perf_counter() - started
    return found


# ----------------------------------------------------------------------------- decision


def decide(scanned: Mapping, probed: Mapping, flags: Mapping) -> dict:
    """The ``tf32_reach`` record from the scan, the probe's outcome and the flags in
    force (the rule in the module docstring): ``reaches``, ``ops`` (the kinds reached),
    ``decided_by``, ``why`` (one line) and the facts it came from."""
    reached = dict(scanned.get("reached") or {})
    status = probed.get("status")
    probe_words = _probe_text(probed)
    scan_words = f"scan: {scanned.get('modules')}, {flags_text(flags)}"
    facts = {"scan": dict(scanned), "probe": dict(probed), "flags": dict(flags)}
    if reached:
        by = "scan and probe" if status == "differs" else "scan"
        why = f"TF32 reaches {reached_text(reached)} ({scan_words}; {probe_words})"
        return {"reaches": True, "ops": list(reached), "decided_by": by, "why": why, **facts}
    if status == "differs":
        why = (f"TF32 reaches an op the module scan cannot see, a functional one ({scan_words}; "
               f"{probe_words})")  # fmt: skip
        return {"reaches": True, "ops": ["an op the scan cannot see"], "decided_by": "probe",
                "why": why, **facts}  # fmt: skip
    if status == "identical" or not any_flag(flags) or flags.get("override"):
        by = "scan and probe" if status == "identical" else "settings"
        why = f"TF32 reaches no op of this model ({scan_words}; {probe_words})"
        return {"reaches": False, "ops": [], "decided_by": by, "why": why, **facts}
    why = (f"TF32 assumed to reach the model: the scan finds no op it reaches but cannot see "
           f"a functional one, and the probe cannot rule one out ({scan_words}; {probe_words})")  # fmt: skip
    return {"reaches": True, "ops": [], "decided_by": "neither: assumed", "why": why, **facts}


def _probe_text(probed: Mapping) -> str:
    status = probed.get("status")
    where = probed.get("first_difference")
    if status == "identical":
        return "probe: outputs bit-identical with TF32 off"
    if status == "differs":
        return f"probe: outputs differ with TF32 off, first at {where}"
    if status == "not reproducible":
        return f"probe: two evaluations with the flags in force differ, first at {where}"
    if status == "error":
        return f"probe failed: {probed.get('reason')}"
    return f"probe not run: {probed.get('reason')}"


def undecided(why: str) -> dict:
    """``tf32_reach`` where nothing is decided: the flags' class stands."""
    return {"reaches": None, "ops": [], "decided_by": None, "why": why,
            "probe": {"status": "not run", "reason": why}}  # fmt: skip


def measure(
    parts: TrainingParts,
    ctx: RunContext,
    run_probe: Callable[[TrainingParts, RunContext], dict] = probe,
) -> dict:
    """The cell's ``tf32_reach`` (the module docstring); ``run_probe``: the probe."""
    device_type = getattr(ctx.torch_device, "type", "")
    amp = ctx.amp.dtype if ctx.amp is not None and ctx.amp.enabled else None
    if device_type != "cuda":
        return undecided(f"TF32 is CUDA's: the cell ran on {device_type or 'no device'}")
    if amp:
        return undecided(f"autocast {amp}: the class is the autocast dtype")
    flags = flags_in_force(ctx.settings_in_force or {})
    scanned = scan(parts.model, flags)
    if any_flag(flags):
        probed = run_probe(parts, ctx)
    else:
        probed = {"status": "not run", "reason": "no TF32 flag on"}
    found = decide(scanned, probed, flags)
    if flags["changed"]:
        found["why"] += f" (flags changed during the cell: {'; '.join(flags['changed'])})"
    return found


def record(parts: TrainingParts, ctx: RunContext) -> dict | None:
    """:func:`measure` into ``ctx.settings_in_force["tf32_reach"]``, after every timed
    region; none in a float64 reference run. Never raises: a failure is the reason."""
    if ctx.spec.get("reference"):
        return None
    try:
        found = measure(parts, ctx)
    except Exception as exc:  # the cell's measurement is complete; say what failed
        found = undecided(f"not decided: {type(exc).__name__}: {exc}"[:300])
    if ctx.settings_in_force is not None:
        ctx.settings_in_force["tf32_reach"] = found
    return found

"""torch.compile variants: their own matrix columns, compilation kept in warm-up,
failures recorded as compile_failed, never suppressed."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench import workloads
from trainbench.launch.classify import classify
from trainbench.measure import training
from trainbench.measure.context import make_context
from trainbench.measure.training import CompileFailedError, run_training


def validated(**workload_overrides) -> dict:
    config = tiny_config(devices=["cpu", "cuda"])
    config["workloads"]["image_cnn"].update(
        {"warmup_steps": 3, "compile": ["eager", "default", "reduce-overhead"]}
    )
    config["workloads"]["image_cnn"].update(workload_overrides)
    return tbconfig.validate_config(config)


def test_each_compile_mode_is_its_own_device_column():
    config = validated()
    cnn_devices = {c.device for c in tbconfig.expand_matrix(config) if c.workload == "image_cnn"}
    assert cnn_devices == {
        "cpu",
        "cpu-compile",
        "cpu-compile-reduce-overhead",
        "cuda",
        "cuda-compile",
        "cuda-compile-reduce-overhead",
    }
    # matmul is a microbenchmark: no compile columns.
    assert {c.device for c in tbconfig.expand_matrix(config) if c.workload == "matmul"} == {
        "cpu",
        "cuda",
    }


def test_compile_mode_reaches_the_spec_and_eager_specs_are_unchanged():
    config = validated()
    compiled = tbconfig.cell_spec(config, tbconfig.Cell("image_cnn", "cuda-compile", 32, 0))
    eager = tbconfig.cell_spec(config, tbconfig.Cell("image_cnn", "cuda", 32, 0))
    assert compiled["compile"] == "default" and compiled["backend"] == "cuda"
    assert "compile" not in eager
    assert compiled["config_hash"] != eager["config_hash"]
    # Adding a compile column leaves the eager cells' specs (and so their records) valid.
    plain = tiny_config(devices=["cpu", "cuda"])
    plain["workloads"]["image_cnn"]["warmup_steps"] = 3
    plain = tbconfig.validate_config(plain)
    assert tbconfig.cell_spec(plain, tbconfig.Cell("image_cnn", "cuda", 32, 0)) == eager


@pytest.mark.parametrize(
    ("device_id", "backend", "threads", "mode"),
    [
        ("cuda-compile", "cuda", None, "default"),
        ("cuda-compile-reduce-overhead", "cuda", None, "reduce-overhead"),
        ("cpu-t2-compile-max-autotune", "cpu", 2, "max-autotune"),
        ("mps", "mps", None, None),
    ],
)
def test_device_ids_parse(device_id, backend, threads, mode):
    variant = tbconfig.find_variant(validated(), device_id)
    assert (variant.backend, variant.threads, variant.compile) == (backend, threads, mode)


@pytest.mark.parametrize("bad", ["cuda-t2", "cpu-compile-fast", "gpu-compile", "cpu-t0"])
def test_bad_device_ids_are_refused_with_the_grammar(bad):
    with pytest.raises(tbconfig.ConfigError, match="-compile-<mode>"):
        tbconfig.find_variant(validated(), bad)


def test_compile_needs_warmup_steps_that_hold_the_compilation():
    config = tiny_config()
    config["workloads"]["image_cnn"].update({"warmup_steps": 1, "compile": ["eager", "default"]})
    with pytest.raises(tbconfig.ConfigError, match=r"workloads\.image_cnn\.warmup_steps"):
        tbconfig.validate_config(config)


def test_unknown_compile_mode_is_refused_by_the_schema():
    config = tiny_config()
    config["workloads"]["image_cnn"]["compile"] = ["fastest"]
    with pytest.raises(tbconfig.ConfigError, match="compile"):
        tbconfig.validate_config(config)


@pytest.fixture
def cnn_cell(tmp_path):
    """A tiny image_cnn cell spec on the CPU, with its data prepared."""

    def make(device: str) -> dict:
        config = validated(batch_sizes=[16], epochs=2)
        config["devices"] = ["cpu"]
        settings = config["workloads"]["image_cnn"]
        workloads.get("image_cnn").prepare_data(settings, tmp_path, 0)
        spec = tbconfig.cell_spec(
            config, tbconfig.Cell("image_cnn", device, 16, 0), data_path=str(tmp_path)
        )
        return copy.deepcopy(spec)

    return make


@pytest.mark.slow
def test_compiled_cell_compiles_the_step_in_warmup_and_evaluates_eager(cnn_cell, monkeypatch):
    calls = []
    compile_step = training.compile_step

    def tracing_compile_step(loss_fn, mode):
        calls.append(mode)
        graphs = []

        def counting_backend(graph_module, example_inputs):
            graphs.append(graph_module)
            return graph_module.forward  # runs the captured graph as is (no C++ compile)

        monkeypatch.setattr(torch, "compile", _with_backend(torch.compile, counting_backend))
        compiled = compile_step(loss_fn, mode)
        tracing_compile_step.graphs = graphs
        return compiled

    monkeypatch.setattr(training, "compile_step", tracing_compile_step)
    spec = cnn_cell("cpu-compile")
    ctx = make_context(spec)
    result = run_training(workloads.get("image_cnn").build_parts(ctx), ctx)

    assert calls == ["default"]
    assert tracing_compile_step.graphs, "dynamo captured no graph: the step was not compiled"
    compile_facts = result["settings"]["compile"]
    assert compile_facts["mode"] == "default"
    assert compile_facts["evaluation"] == "eager module"
    assert compile_facts["errors_suppressed"] is False
    # The configured 3 steps are the least warm-up: the steady-state test may find more
    # (a loaded machine compiles slowly), never fewer.
    warmup = result["warmup"]
    assert warmup["configured_steps"] == 3 and warmup["steps"] >= 3
    assert warmup["first_step_seconds"] > 0
    assert result["timed"]["steps"] > 0 and result["task"]["final"] is not None


def _with_backend(original, backend):
    def compile_with(fn, mode=None, **kwargs):
        return original(fn, backend=backend, **kwargs)

    return compile_with


@pytest.mark.slow
def test_eager_cell_records_no_compile(cnn_cell):
    ctx = make_context(cnn_cell("cpu"))
    result = run_training(workloads.get("image_cnn").build_parts(ctx), ctx)
    assert result["settings"]["compile"]["mode"] is None
    assert result["warmup"]["first_step_seconds"] > 0


def test_a_compile_error_fails_the_cell_as_compile_failed(cnn_cell, monkeypatch):
    def refusing_backend(graph_module, example_inputs):
        raise RuntimeError("backend refused the graph (test)")

    monkeypatch.setattr(torch, "compile", _with_backend(torch.compile, refusing_backend))
    ctx = make_context(cnn_cell("cpu-compile"))
    with pytest.raises(CompileFailedError, match=r"torch\.compile\(mode='default'\) failed") as err:
        run_training(workloads.get("image_cnn").build_parts(ctx), ctx)
    exc = err.value
    verdict = classify(
        exception_type=type(exc).__name__,
        exception_mro=[cls.__name__ for cls in type(exc).__mro__],
        message=str(exc),
    )
    assert verdict.error_class == "compile_failed"
    assert type(exc.__cause__).__name__ == "BackendCompilerFailed"


def test_injected_compile_fault_raises_dynamos_own_error():
    from trainbench.measure.faults import inject

    with pytest.raises(Exception) as err:
        inject("compile_failed")
    names = [cls.__name__ for cls in type(err.value).__mro__]
    assert "BackendCompilerFailed" in names
    assert (
        classify(exception_type=names[0], exception_mro=names, message=str(err.value)).error_class
        == "compile_failed"
    )

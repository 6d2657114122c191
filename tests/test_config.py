"""Config schema, user-facing error messages, and the benchmark matrix."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import yaml
from trainbench.config import (
    Cell,
    ConfigError,
    cell_spec,
    device_variants,
    expand_matrix,
    faults_for,
    find_variant,
    iter_device_ids,
    run_order,
    validate_config,
)


def test_repo_config_validates(repo_root):
    with open(repo_root / "config.yaml") as fh:
        config = yaml.safe_load(fh)
    validated = validate_config(config)
    assert {"image_cnn", "matmul", "text_multilabel"} <= set(validated["workloads"])
    assert validated["device_settings"]["mps"]["memory_fraction"] == 0.8
    assert expand_matrix(validated)


def test_full_config_validates_if_present(repo_root):
    path = repo_root / "configs" / "full.yaml"
    if not path.exists():
        pytest.skip("configs/full.yaml is absent")
    with open(path) as fh:
        config = yaml.safe_load(fh)
    try:
        validate_config(config)
    except ConfigError as exc:
        # Only a missing optional package / data folder is acceptable here.
        assert "torchvision" in str(exc) or "does not exist" in str(exc), str(exc)


def test_defaults_are_filled(schema_defaults_config):
    config = validate_config(schema_defaults_config)
    ds = config["device_settings"]
    assert ds["mps"]["memory_fraction"] == 0.8
    assert ds["mps"]["autocast"] == "fp16"
    assert ds["cpu"]["num_workers"] == 0
    assert ds["cpu"]["autocast"] == "off"
    assert ds["cpu"]["threads"] is None
    assert ds["cuda"]["pin_memory"] is True
    assert ds["cuda"]["autocast"] == "auto"
    assert ds["cuda"]["deterministic"] is False  # from the shared allOf branch
    assert config["launcher"]["max_attempts"] == 2
    assert config["launcher"]["allow_fault_injection"] is False
    assert config["fault_injection"] == []
    cnn = config["workloads"]["image_cnn"]
    assert cnn["gradient_accumulation"] == 1
    assert cnn["optimizer"]["lr"] == 0.001
    assert cnn["data"]["channels"] == 3
    assert cnn["data"]["n_train"] == 64  # given values are kept
    matmul = config["workloads"]["matmul"]
    assert matmul["batch_sizes"] == [1]
    assert matmul["sizes"] == [16, 32]
    assert matmul["dtype"] == "float32"


def test_defaults_do_not_leak_between_configs(schema_defaults_config):
    a = validate_config(copy.deepcopy(schema_defaults_config))
    a["launcher"]["retry_on"].append("oom")
    b = validate_config(copy.deepcopy(schema_defaults_config))
    assert "oom" not in b["launcher"]["retry_on"]


def _set(config: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


BAD_CONFIGS = [
    # (id, dotted key, value, fragments the message must contain)
    (
        "unknown-workload",
        "workloads.resnet",
        {},
        ["`workloads.resnet`", "image_cnn", "matmul", "entry"],
    ),
    ("unknown-device", "devices", ["cpu", "tpu"], ["devices[1]", "'tpu'", "cpu, mps, cuda"]),
    (
        "workload-device",
        "workloads.matmul.devices",
        ["tpu"],
        ["workloads.matmul.devices[0]", "'tpu'", "cpu, mps, cuda"],
    ),
    ("batch-size-zero", "workloads.image_cnn.batch_sizes", [0], ["batch_sizes[0]", "at least 1"]),
    (
        "batch-size-negative",
        "workloads.image_cnn.batch_sizes",
        [8, -4],
        ["batch_sizes[1]", "-4", "at least 1"],
    ),
    ("epochs-string", "workloads.image_cnn.epochs", "2", ["workloads.image_cnn.epochs", "integer"]),
    ("unknown-top-level", "colour", "blue", ["`colour`", "top level", "workloads"]),
    (
        "unknown-nested",
        "device_settings.cpu.thread",
        4,
        ["`thread`", "device_settings.cpu", "threads"],
    ),
    ("unknown-launcher-key", "launcher.retries", 3, ["`retries`", "launcher", "max_attempts"]),
    (
        "bad-autocast",
        "device_settings.cuda.autocast",
        "fp8",
        ["device_settings.cuda.autocast", "'fp8'", "off, auto, fp16, bf16"],
    ),
    (
        "bad-progress",
        "launcher.progress",
        "sometimes",
        ["launcher.progress", "auto, always, never"],
    ),
    ("zero-repeats", "repeats", 0, ["`repeats`", "at least 1"]),
    ("zero-timeout", "launcher.timeout_s", 0, ["launcher.timeout_s", "greater than 0"]),
    (
        "mps-fraction-too-big",
        "device_settings.mps.memory_fraction",
        3.0,
        ["device_settings.mps.memory_fraction", "at most 2"],
    ),
    ("threads-zero", "device_settings.cpu.threads", 0, ["device_settings.cpu.threads"]),
    ("empty-devices", "devices", [], ["`devices`", "empty"]),
    ("empty-workloads", "workloads", {}, ["`workloads`", "empty"]),
    (
        "workload-device-not-top-level",
        "workloads.matmul.devices",
        ["cuda"],
        ["workloads.matmul.devices", "'cuda'", "not in the top-level"],
    ),
    (
        "mnist-path-missing",
        "workloads.image_cnn.data",
        {"source": "mnist_idx", "path": "/nonexistent/trainbench/mnist"},
        ["workloads.image_cnn.data.path", "/nonexistent/trainbench/mnist", "does not exist"],
    ),
    (
        "mnist-path-unset",
        "workloads.image_cnn.data",
        {"source": "mnist_idx"},
        ["workloads.image_cnn.data.path", "required"],
    ),
]


@pytest.mark.parametrize(
    "key, value, fragments", [b[1:] for b in BAD_CONFIGS], ids=[b[0] for b in BAD_CONFIGS]
)
def test_bad_config_names_key(schema_defaults_config, key, value, fragments):
    _set(schema_defaults_config, key, value)
    with pytest.raises(ConfigError) as info:
        validate_config(schema_defaults_config)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert "Traceback" not in message


def test_missing_workloads_is_reported(schema_defaults_config):
    del schema_defaults_config["workloads"]
    with pytest.raises(ConfigError, match="'workloads' is a required property"):
        validate_config(schema_defaults_config)


def test_every_problem_is_reported_at_once(schema_defaults_config):
    schema_defaults_config["devices"] = ["tpu"]
    schema_defaults_config["workloads"]["image_cnn"]["epochs"] = "2"
    with pytest.raises(ConfigError) as info:
        validate_config(schema_defaults_config)
    assert "'tpu'" in str(info.value)
    assert "epochs" in str(info.value)


def test_mnist_idx_existing_path_is_accepted(schema_defaults_config, tmp_path):
    schema_defaults_config["workloads"]["image_cnn"]["data"] = {
        "source": "mnist_idx",
        "path": str(tmp_path),
    }
    with pytest.raises(ConfigError, match=r"holds no t10k-images-idx3-ubyte\(\.gz\), t10k-l"):
        validate_config(copy.deepcopy(schema_defaults_config))
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(b"")
    validate_config(schema_defaults_config)


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed"
)
def test_torchvision_source_without_torchvision(schema_defaults_config):
    schema_defaults_config["workloads"]["image_cnn"]["data"] = {"source": "torchvision"}
    with pytest.raises(ConfigError) as info:
        validate_config(schema_defaults_config)
    message = str(info.value)
    assert "workloads.image_cnn.data.source" in message
    assert "torchvision is not installed" in message


FAULT = {"workload": "image_cnn", "device": "cpu", "fault": "exception"}


def test_fault_injection_refused_without_permission(schema_defaults_config, monkeypatch):
    monkeypatch.delenv("TRAINBENCH_ALLOW_FAULTS", raising=False)
    schema_defaults_config["fault_injection"] = [dict(FAULT)]
    with pytest.raises(ConfigError) as info:
        validate_config(schema_defaults_config)
    assert "fault_injection" in str(info.value)
    assert "launcher.allow_fault_injection" in str(info.value)


def test_fault_injection_allowed_by_launcher_or_env(schema_defaults_config, monkeypatch):
    monkeypatch.delenv("TRAINBENCH_ALLOW_FAULTS", raising=False)
    allowed = copy.deepcopy(schema_defaults_config)
    allowed["fault_injection"] = [dict(FAULT)]
    allowed["launcher"] = {"allow_fault_injection": True}
    validate_config(allowed)

    monkeypatch.setenv("TRAINBENCH_ALLOW_FAULTS", "1")
    by_env = copy.deepcopy(schema_defaults_config)
    by_env["fault_injection"] = [dict(FAULT)]
    validate_config(by_env)


def test_fault_injection_unknown_fault_and_workload(schema_defaults_config, monkeypatch):
    monkeypatch.setenv("TRAINBENCH_ALLOW_FAULTS", "1")
    bad_fault = copy.deepcopy(schema_defaults_config)
    bad_fault["fault_injection"] = [dict(FAULT, fault="meltdown")]
    with pytest.raises(ConfigError, match=r"fault_injection\[0\]\.fault.*sigabrt"):
        validate_config(bad_fault)
    bad_workload = copy.deepcopy(schema_defaults_config)
    bad_workload["fault_injection"] = [dict(FAULT, workload="nope")]
    with pytest.raises(ConfigError, match=r"fault_injection\[0\]\.workload.*'nope'"):
        validate_config(bad_workload)


# ----------------------------------------------------------------------------- normalisation


def test_yaml_autocast_off_is_normalised(schema_defaults_config):
    loaded = yaml.safe_load("cpu:\n  autocast: off\nmps:\n  autocast: off\n")
    assert loaded["cpu"]["autocast"] is False  # YAML 1.1: off is a boolean
    schema_defaults_config["device_settings"] = loaded
    config = validate_config(schema_defaults_config)
    assert config["device_settings"]["cpu"]["autocast"] == "off"
    assert config["device_settings"]["mps"]["autocast"] == "off"
    assert config["device_settings"]["cuda"]["autocast"] == "auto"


# ----------------------------------------------------------------------------- matrix


def _matrix_config(base: dict, devices: list[str], repeats: int) -> dict:
    config = copy.deepcopy(base)
    config["devices"] = devices
    config["repeats"] = repeats
    config["workloads"]["image_cnn"]["batch_sizes"] = [8, 16]
    config["workloads"]["matmul"]["batch_sizes"] = [1, 4]
    return validate_config(config)


@pytest.mark.parametrize(
    "devices, repeats", [(["cpu"], 1), (["cpu", "mps"], 2), (["cpu", "mps", "cuda"], 3)]
)
def test_expand_matrix_count(schema_defaults_config, devices, repeats):
    config = _matrix_config(schema_defaults_config, devices, repeats)
    cells = expand_matrix(config)
    assert len(cells) == 2 * len(devices) * 2 * repeats
    assert len(set(cells)) == len(cells)
    assert cells == sorted(cells)
    assert {c.rep for c in cells} == set(range(repeats))
    assert {c.device for c in cells} == set(devices)


def test_expand_matrix_uses_device_default_batch_size(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["devices"] = ["cpu", "mps"]
    del config["workloads"]["image_cnn"]["batch_sizes"]
    config = validate_config(config)
    sizes = {c.device: c.batch_size for c in expand_matrix(config) if c.workload == "image_cnn"}
    assert sizes == {"cpu": 16, "mps": 64}


def test_expand_matrix_respects_enabled_and_workload_devices(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["devices"] = ["cpu", "cuda"]
    config["workloads"]["matmul"]["enabled"] = False
    config["workloads"]["image_cnn"]["devices"] = ["cuda"]
    cells = expand_matrix(validate_config(config))
    assert {(c.workload, c.device) for c in cells} == {("image_cnn", "cuda")}


def test_cpu_thread_list_makes_one_device_per_count(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["device_settings"] = {"cpu": {"threads": [1, 2]}}
    config = validate_config(config)
    variants = device_variants(config)
    assert [(v.id, v.backend, v.threads) for v in variants] == [
        ("cpu-t1", "cpu", 1),
        ("cpu-t2", "cpu", 2),
    ]
    cells = expand_matrix(config)
    assert {c.device for c in cells} == {"cpu-t1", "cpu-t2"}
    spec = cell_spec(config, Cell("image_cnn", "cpu-t2", 8, 0))
    assert spec["backend"] == "cpu"
    assert spec["device_settings"]["threads"] == 2
    with pytest.raises(ConfigError, match="'cpu'"):
        find_variant(config, "cpu")


@pytest.mark.parametrize("threads, threads_in_spec", [(1, 1), ([1], 1), (None, None)])
def test_single_cpu_thread_setting_keeps_plain_cpu(
    schema_defaults_config, threads, threads_in_spec
):
    config = copy.deepcopy(schema_defaults_config)
    config["device_settings"] = {"cpu": {"threads": threads}}
    config = validate_config(config)
    assert [v.id for v in device_variants(config)] == ["cpu"]
    spec = cell_spec(config, Cell("image_cnn", "cpu", 8, 0))
    assert spec["device_settings"]["threads"] == threads_in_spec


def test_cell_spec_and_config_hash(schema_defaults_config):
    config = validate_config(copy.deepcopy(schema_defaults_config))
    rep0 = cell_spec(config, Cell("image_cnn", "cpu", 8, 0))
    rep1 = cell_spec(config, Cell("image_cnn", "cpu", 8, 1))
    assert rep0["config_hash"] == rep1["config_hash"]
    assert rep0["run_seed"] == config["seed"] + 0
    assert rep1["run_seed"] == config["seed"] + 1
    assert rep0["cell"]["rep"] == 0 and rep1["cell"]["rep"] == 1

    other_bs = cell_spec(config, Cell("image_cnn", "cpu", 16, 0))
    assert other_bs["config_hash"] != rep0["config_hash"]

    changed = copy.deepcopy(schema_defaults_config)
    changed["workloads"]["image_cnn"]["epochs"] = 3
    changed = validate_config(changed)
    assert cell_spec(changed, Cell("image_cnn", "cpu", 8, 0))["config_hash"] != rep0["config_hash"]

    device_changed = copy.deepcopy(schema_defaults_config)
    device_changed["device_settings"] = {"cpu": {"num_workers": 1}}
    device_changed = validate_config(device_changed)
    assert (
        cell_spec(device_changed, Cell("image_cnn", "cpu", 8, 0))["config_hash"]
        != rep0["config_hash"]
    )


def test_cell_spec_workload_timeout_overrides_launcher(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["workloads"]["matmul"]["timeout_s"] = 42
    config = validate_config(config)
    assert cell_spec(config, Cell("matmul", "cpu", 1, 0))["launcher"]["timeout_s"] == 42
    assert cell_spec(config, Cell("image_cnn", "cpu", 8, 0))["launcher"]["timeout_s"] == 1800


def test_faults_for_matches_cell(schema_defaults_config, monkeypatch):
    monkeypatch.setenv("TRAINBENCH_ALLOW_FAULTS", "1")
    config = copy.deepcopy(schema_defaults_config)
    config["workloads"]["image_cnn"]["batch_sizes"] = [8, 32]
    config["fault_injection"] = [dict(FAULT, rep=1), dict(FAULT, batch_size=32)]
    config = validate_config(config)
    assert faults_for(config, Cell("image_cnn", "cpu", 8, 0)) == []
    assert faults_for(config, Cell("image_cnn", "cpu", 8, 1)) == [dict(FAULT, rep=1)]
    assert len(faults_for(config, Cell("image_cnn", "cpu", 32, 1))) == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(device_settings={"cpu": {"threads": 10_000}}), "logical cores"),
        (lambda c: c.update(report={"baseline_device": "gpu"}), "`report.baseline_device`"),
        (
            lambda c: c.update(
                launcher={"allow_fault_injection": True},
                fault_injection=[{"workload": "matmul", "device": "CPU", "fault": "sigabrt"}],
            ),
            "`fault_injection[0].device` 'CPU'",
        ),
        (
            lambda c: c.update(repeats={"min": 3, "max": 5}),
            "sets no `target_ci_halfwidth`",
        ),
        (lambda c: c.update(repeats={"min": 3, "max": 2}), "below `repeats.min`"),
    ],
    ids=["threads", "baseline", "fault_device", "repeats_target", "repeats_order"],
)
def test_inputs_that_would_misbehave_are_refused_naming_key_and_fix(
    schema_defaults_config, change, message
):
    config = copy.deepcopy(schema_defaults_config)
    change(config)
    with pytest.raises(ConfigError, match="Fix:") as error:
        validate_config(config)
    assert message in str(error.value)


def test_more_threads_than_cores_can_be_allowed_for_bigger_cluster_nodes(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["device_settings"] = {"cpu": {"threads": [1, 10_000]}}
    config["launcher"] = {"allow_more_threads_than_cores": True}
    assert "cpu-t10000" in [v.id for v in device_variants(validate_config(config))]


def test_config_files_name_the_yaml_error_line(tmp_path):
    from trainbench.config.files import config_file_problems

    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: 0\nrepeats: [1\nworkloads: {}\n")
    problems = config_file_problems([broken, tmp_path / "absent.yaml"])
    assert "broken.yaml line 3, column 10: not valid YAML" in problems[0]
    assert "absent.yaml' does not exist" in problems[1]


def test_workload_cpu_threads_make_thread_devices_for_that_workload_only(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["workloads"]["image_cnn"]["cpu_threads"] = [1, 2]
    config = validate_config(config)
    devices = {(c.workload, c.device) for c in expand_matrix(config)}
    assert {d for w, d in devices if w == "image_cnn"} == {"cpu-t1", "cpu-t2"}
    assert {d for w, d in devices if w == "matmul"} == {"cpu"}
    assert list(iter_device_ids(config)) == ["cpu-t1", "cpu-t2", "cpu"]
    assert cell_spec(config, Cell("image_cnn", "cpu-t1", 8, 0))["device_settings"]["threads"] == 1
    assert cell_spec(config, Cell("matmul", "cpu", 1, 0))["device_settings"]["threads"] is None


def test_compile_modes_can_be_set_per_backend(schema_defaults_config):
    config = copy.deepcopy(schema_defaults_config)
    config["devices"] = ["cpu", "cuda"]
    config["workloads"]["image_cnn"].update(
        compile={"cuda": ["eager", "reduce-overhead"]}, warmup_steps=3
    )
    ids = [v.id for v in device_variants(validate_config(config), workload="image_cnn")]
    assert ids == ["cpu", "cuda", "cuda-compile-reduce-overhead"]  # no cpu CUDA graphs


@pytest.mark.parametrize(
    "text, backend, threads, mode, fallback, hardware",
    [
        ("cpu", "cpu", None, None, False, None),
        ("cpu-t4-compile-max-autotune", "cpu", 4, "max-autotune", False, None),
        ("cuda-compile", "cuda", None, "default", False, None),
        ("mps+cpu-fallback", "mps", None, None, True, None),
        ("cpu@Intel Xeon Platinum 8480+", "cpu", None, None, False, "Intel Xeon Platinum 8480+"),
        ("mps@Apple M3 Max+cpu-fallback", "mps", None, None, True, "Apple M3 Max"),
    ],
)
def test_one_device_id_grammar_parses_and_formats(text, backend, threads, mode, fallback, hardware):
    from trainbench.config.device_ids import DeviceId

    parsed = DeviceId.parse(text)
    assert (parsed.backend, parsed.threads, parsed.compile) == (backend, threads, mode)
    assert (parsed.fallback, parsed.hardware) == (fallback, hardware)
    assert DeviceId.parse(parsed.format()) == parsed
    for bad in ("gpu", "mps-t2", "cuda-compile-fast", "CPU"):
        assert not DeviceId.is_valid(bad)


def test_run_order_puts_rounds_first_and_a_workloads_devices_together(schema_defaults_config):
    """Every cell of repeat k runs before any of repeat k + 1; within a round one
    workload and batch size's devices share a priority (they run one after another),
    each group above the next; data and plans (`top`) come before every cell."""
    config = _matrix_config(schema_defaults_config, ["cpu", "mps", "cuda"], 3)
    order = run_order(config)
    cells = expand_matrix(config, "max")
    priority = {c: order.priority(c.workload, str(c.batch_size), str(c.rep)) for c in cells}
    assert all(p < order.top for p in priority.values())
    for a in cells:
        for b in cells:
            if a.rep < b.rep:
                assert priority[a] > priority[b]
            elif a.rep == b.rep and (a.workload, a.batch_size) == (b.workload, b.batch_size):
                assert priority[a] == priority[b]
            elif a.rep == b.rep:
                ranks = (
                    order.groups.index((a.workload, a.batch_size)),
                    order.groups.index((b.workload, b.batch_size)),
                )
                assert (priority[a] > priority[b]) == (ranks[0] < ranks[1])
    assert min(priority.values()) > 0
    assert len(order.groups) == 4  # two workloads x two batch sizes

"""The offline wheelhouse's choices (trainbench.offline): freeze files, pins with
extras, what pip resolves (torch at the machine's version, --keep-target), and what
is downloaded, used from the target or dropped. No network: pip is not run."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from trainbench.offline import check, requirements, selection, venv, wheelhouse
from trainbench.offline.requirements import Installed, RequirementsError, canonical

REPO = Path(__file__).resolve().parents[1]
H100_LIKE_FREEZE = """\
absl-py==2.5.0
ConfigArgParse==1.9.0
Jinja2==3.1.6
# a comment
jsonschema @ file:///work/main/.whl_pre/jsonschema-4.26.0-py3-none-any.whl#sha256=d489
ruptures @ file:///tmp/w/ruptures-1.1.10-cp312-cp312-manylinux_2_17_x86_64.whl
foo @ git+https://example.invalid/foo.git@abc123
# Editable Git install with no remote (trainbench==0.1.0)
-e /work/main
typing_extensions==4.16.0
torch==2.11.0+cu130
nvidia-cudnn-cu13==9.19.0.56
triton==3.6.0
numpy==2.5.2
"""


def _installed(**versions: str) -> dict[str, Installed]:
    return {canonical(k): Installed(canonical(k), v, f"{k}=={v}") for k, v in versions.items()}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Jinja2", "jinja2"),
        ("typing_extensions", "typing-extensions"),
        ("ConfigArgParse", "configargparse"),
        ("zope.interface", "zope-interface"),
        ("faiss_cpu", "faiss-cpu"),
    ],
)
def test_names_are_compared_in_their_canonical_form(name, expected):
    assert canonical(name) == expected


def test_a_freeze_file_gives_versions_by_canonical_name():
    found = requirements.parse_freeze(H100_LIKE_FREEZE)
    assert found["jinja2"].version == "3.1.6"
    assert found["configargparse"].version == "1.9.0"
    assert found["typing-extensions"].version == "4.16.0"
    assert found["torch"].version == "2.11.0+cu130"


def test_direct_url_lines_take_the_version_from_the_file_name_or_have_none():
    found = requirements.parse_freeze(H100_LIKE_FREEZE)
    assert found["jsonschema"].version == "4.26.0"
    assert found["ruptures"].version == "1.1.10"
    assert found["foo"].version is None


def test_editable_lines_and_comments_are_skipped():
    found = requirements.parse_freeze(H100_LIKE_FREEZE)
    assert sorted(found) == [
        "absl-py", "configargparse", "foo", "jinja2", "jsonschema", "numpy",
        "nvidia-cudnn-cu13", "ruptures", "torch", "triton", "typing-extensions",
    ]  # fmt: skip


def test_a_line_that_is_not_freeze_output_is_refused_with_its_line_number():
    with pytest.raises(RequirementsError, match=r"f\.txt:2: .*'numpy>=2'.*pip freeze"):
        requirements.parse_freeze("a==1\nnumpy>=2\n", "f.txt")


PYPROJECT = {
    "build-system": {"requires": ["setuptools>=69"]},
    "project": {
        "dependencies": ["torch==2.13.0", "numpy==2.4.6", "nvidia-ml-py==13.615.71"],
        "optional-dependencies": {
            "bench": ["accelerate==1.15.0"],
            "slurm": ["throttler==1.2.3; python_version >= '3.11'"],
            "apple": ["zeus-apple-silicon==1.1.0; sys_platform == 'darwin'"],
            "dev": ["pytest==9.2.0", "trainbench-workflow[bench]"],
        },
    },
}


def _names(reqs) -> list[str]:
    return [canonical(r.name) for r in reqs]


def test_the_projects_own_extras_are_expanded():
    pins = requirements.pinned_requirements(PYPROJECT, ["dev"])
    assert _names(pins) == ["torch", "numpy", "nvidia-ml-py", "pytest", "accelerate"]


def test_an_unknown_extra_is_refused_naming_the_known_ones():
    with pytest.raises(RequirementsError, match="unknown extra.*gpu.*apple, bench, dev, slurm"):
        requirements.pinned_requirements(PYPROJECT, ["gpu"])


def test_markers_are_judged_for_the_targets_python():
    pins = requirements.pinned_requirements(PYPROJECT, ["slurm", "apple"])
    on_310 = requirements.for_target(pins, requirements.target_environment("3.10"))
    on_312 = requirements.for_target(pins, requirements.target_environment("3.12"))
    assert "throttler" not in _names(on_310)
    assert "throttler" in _names(on_312)
    assert "zeus-apple-silicon" not in _names(on_312)  # this machine is Linux
    assert all(r.marker is None for r in on_312)


def test_a_malformed_python_version_is_refused():
    with pytest.raises(RequirementsError, match="MAJOR.MINOR"):
        requirements.target_environment("py3")


def _plan(installed, keep=(), extras=("bench",)):
    pins = requirements.pinned_requirements(PYPROJECT, extras)
    build = requirements.build_requirements(PYPROJECT)
    return selection.plan(pins, build, installed, keep)


def test_pip_resolves_against_a_stand_in_for_the_machines_torch():
    plan = _plan(_installed(torch="2.11.0+cu130", setuptools="81.0.0"))
    assert plan.requirements[0] == f"torch==2.11.0+{selection.STUB_LABEL}"
    assert plan.torch_version == "2.11.0+cu130"
    assert [d.name for d in plan.deviations] == ["torch"]
    # A build requirement the target meets is held at the target's version.
    assert "setuptools==81.0.0" in plan.requirements


def test_without_a_freeze_the_pinned_torch_is_assumed_and_no_deviation_recorded():
    plan = _plan(None)
    assert plan.requirements[0] == f"torch==2.13.0+{selection.STUB_LABEL}"
    assert plan.deviations == []
    assert "setuptools>=69" in plan.requirements


def test_a_target_without_torch_is_refused():
    with pytest.raises(RequirementsError, match="lists no torch"):
        _plan(_installed(numpy="2.5.2"))


def test_keep_target_pins_the_targets_version_and_records_the_deviation():
    installed = _installed(torch="2.11.0", numpy="2.5.2", filelock="3.32.5")
    plan = _plan(installed, keep=["NumPy", "filelock"])
    assert "numpy==2.5.2" in plan.requirements and "numpy==2.4.6" not in plan.requirements
    assert plan.constraints == ["filelock==3.32.5"]  # not pinned: a constraint only
    deviations = {d.name: (d.pinned, d.used) for d in plan.deviations}
    assert deviations["numpy"] == ("2.4.6", "2.5.2")
    assert deviations["filelock"] == (None, "3.32.5")


def test_keep_target_of_a_package_the_target_lacks_is_refused():
    with pytest.raises(
        RequirementsError, match="--keep-target scipy: the target freeze has no scipy"
    ):
        _plan(_installed(torch="2.11.0"), keep=["scipy"])


def test_keep_target_torch_is_refused():
    with pytest.raises(RequirementsError, match="always the machine's"):
        _plan(_installed(torch="2.11.0"), keep=["torch"])


def _resolved(name: str, version: str) -> selection.Resolved:
    url = f"https://files.example/{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return selection.Resolved(canonical(name), version, url, "ab" * 32)


def _actions(resolved, installed, keep=()) -> dict[str, tuple[str, str]]:
    plan = _plan(installed, keep)
    return {d.name: (d.action, d.reason) for d in selection.select(resolved, installed, plan)}


def test_torch_and_its_cuda_companions_are_dropped_but_not_the_nvml_pin():
    installed = _installed(torch="2.11.0", triton="3.6.0")
    resolved = [
        _resolved("torch", "2.11.0+machine"),
        _resolved("nvidia-cudnn-cu13", "9.19.0.56"),
        _resolved("triton", "3.6.0"),
        _resolved("nvidia-ml-py", "13.615.71"),
    ]
    actions = _actions(resolved, installed)
    assert actions["torch"][0] == selection.DROPPED
    assert actions["nvidia-cudnn-cu13"][0] == selection.DROPPED
    assert actions["triton"][0] == selection.DROPPED
    assert actions["nvidia-ml-py"] == (selection.DOWNLOAD, "missing on the target")


def test_a_package_the_target_has_at_the_resolved_version_is_not_downloaded():
    installed = _installed(torch="2.11.0", **{"Jinja2": "3.1.6", "tqdm": "4.70", "numpy": "2.5.2"})
    resolved = [
        _resolved("jinja2", "3.1.6"),
        _resolved("tqdm", "4.70.0"),
        _resolved("numpy", "2.4.6"),
    ]
    actions = _actions(resolved, installed)
    assert actions["jinja2"][0] == selection.FROM_TARGET
    assert actions["tqdm"][0] == selection.FROM_TARGET  # 4.70 == 4.70.0
    assert actions["numpy"] == (selection.DOWNLOAD, "the target has 2.5.2")


def test_a_makefile_command_is_downloaded_even_at_the_targets_version():
    installed = _installed(torch="2.11.0", snakemake="9.27.1")
    actions = _actions([_resolved("snakemake", "9.27.1")], installed)
    assert actions["snakemake"][0] == selection.DOWNLOAD
    assert ".venv/bin" in actions["snakemake"][1]


def test_the_manifest_lists_each_package_once_with_its_reason():
    installed = _installed(torch="2.11.0", numpy="2.5.2", jinja2="3.1.6")
    resolved = [_resolved("torch", "2.11.0+machine"), _resolved("numpy", "2.5.2"), _resolved("jinja2", "3.1.6"), _resolved("ruptures", "1.1.10")]  # fmt: skip
    plan = _plan(installed, keep=["numpy"])
    sections = selection.manifest_sections(selection.select(resolved, installed, plan), plan)
    assert [r["name"] for r in sections["wheels"]] == ["ruptures"]
    assert sections["wheels"][0]["filename"] == "ruptures-1.1.10-py3-none-any.whl"
    assert [r["name"] for r in sections["from_target"]] == ["jinja2", "numpy"]
    assert sections["dropped"] == [
        {"name": "torch", "version": "2.11.0", "reason": plan.torch_source}
    ]
    assert [d["name"] for d in sections["deviations"]] == ["torch", "numpy"]


def _report(*items: tuple[str, str, list[str]]) -> dict:
    return {
        "install": [
            {
                "metadata": {"name": name, "version": version, "requires_dist": requires},
                "download_info": {"url": f"https://x/{name}-{version}-py3-none-any.whl"},
            }
            for name, version, requires in items
        ]
    }


def test_unpinned_packages_are_held_at_the_targets_version_only_where_it_fits():
    report = _report(
        ("transformers", "5.23.0", ["huggingface-hub<3,>=1.3", "regex!=2019.12.17"]),
        ("huggingface-hub", "2.4.0", ["filelock>=3.40; python_version >= '3.8'"]),
        ("filelock", "4.2.12", []),
        ("regex", "2026.11.19", ["oldthing<1; python_version < '3.0'"]),
        ("numpy", "2.4.6", []),
    )
    installed = _installed(
        torch="2.11.0", **{"huggingface_hub": "1.33.0", "filelock": "3.32.5", "regex": "2026.9.3", "numpy": "2.5.2"}
    )  # fmt: skip
    plan = _plan(installed)
    preferred = selection.target_preferences(
        report, installed, plan, requirements.target_environment("3.12")
    )
    assert preferred == {
        "huggingface-hub": ("1.33.0", "2.4.0"),
        "regex": ("2026.9.3", "2026.11.19"),
    }
    held = selection.with_preferences(plan, preferred)
    assert held.constraints == ["huggingface-hub==1.33.0", "regex==2026.9.3"]


def test_extras_asked_of_a_dependency_count_for_its_requirements():
    report = _report(
        ("a", "1.0", ["b[fast]>=1"]),
        ("b", "1.0", ["c>=2; extra == 'fast'"]),
        ("c", "2.5", []),
    )
    specifiers = selection.requirement_specifiers(report, requirements.target_environment("3.12"))
    assert [str(s) for s in specifiers["c"]] == [">=2"]


def test_the_default_platforms_are_manylinux_up_to_glibc_2_28_with_legacy_names():
    tags = wheelhouse.manylinux_platforms()
    assert tags[0] == "manylinux_2_28_x86_64"
    assert "manylinux_2_29_x86_64" not in tags
    for legacy in ("manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"):
        assert legacy in tags


def test_the_torch_stand_in_is_a_pure_wheel_of_that_version_without_dependencies(tmp_path):
    wheel = wheelhouse.write_stub_wheel(tmp_path, "torch", "2.11.0+machine")
    name, version, _, _ = parse_wheel_filename(wheel.name)
    assert (name, str(version)) == ("torch", "2.11.0+machine")
    assert wheelhouse.is_pure(wheel)
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read("torch-2.11.0+machine.dist-info/METADATA").decode()
    assert "Version: 2.11.0+machine" in meta and "Requires-Dist" not in meta
    assert Requirement("torch==2.11.0").specifier.contains("2.11.0+machine")


def test_a_non_empty_folder_without_a_manifest_is_not_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(wheelhouse.WheelhouseError, match="not replacing it"):
        wheelhouse.check_destination(tmp_path)
    (tmp_path / wheelhouse.MANIFEST).write_text("{}")
    wheelhouse.check_destination(tmp_path)


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.11.0", "2.13.0", "2.13.0+cpu", "2.12.1"])
def test_torch_in_the_supported_range_passes(version):
    assert check.torch_problem(version) is None


@pytest.mark.parametrize("version", ["2.10.1+cu128", "2.14.0", "not-a-version"])
def test_torch_outside_the_range_is_refused_naming_it_and_the_override(version):
    problem = check.torch_problem(version)
    assert version in problem and "--allow-torch" in problem
    assert check.torch_problem(version, allow=True) is None


def test_only_the_torch_versions_named_as_tested_count_as_tested():
    assert check.torch_tested("2.11.0+cu130") and check.torch_tested("2.13.0+cpu")
    assert not check.torch_tested("2.12.0")


def _all_pins() -> list[Requirement]:
    pyproject = requirements.read_pyproject(REPO / "pyproject.toml")
    extras = pyproject["project"]["optional-dependencies"]
    return requirements.pinned_requirements(pyproject, sorted(extras))


def test_every_installed_pin_is_imported_under_a_module_it_ships():
    modules = metadata.packages_distributions()
    shipped: dict[str, set[str]] = {}
    for module, distributions in modules.items():
        for distribution in distributions:
            shipped.setdefault(canonical(distribution), set()).add(module)
    checked = 0
    for pin in _all_pins():
        name = canonical(pin.name)
        if name in shipped:
            assert check.import_name(name) in shipped[name], name
            checked += 1
    assert checked >= 20  # the runtime and dev pins are installed where tests run


def test_the_makefile_markers_and_commands_are_the_ones_the_install_knows():
    makefile = (REPO / "Makefile").read_text()
    for name in venv.MAKE_MARKERS.values():
        assert re.search(rf"^\w+ := \$\(VENV\)/{re.escape(name)}$", makefile, re.M), name
    commands = set(re.findall(r"\$\(BIN\)/([\w-]+)", makefile)) - {"python", "pip"}
    assert commands and commands <= set(selection.VENV_COMMANDS)


def test_the_install_says_how_far_the_torch_that_runs_is_vouched_for():
    assert check.torch_support("2.11.0+cu130") == "tested"
    assert check.torch_support("2.12.0") == "in the supported range, not itself tested"
    assert "allowed by --allow-torch" in check.torch_support("2.10.0")

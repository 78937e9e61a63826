"""The container rules on probe output shaped as `make sam-local` records it from a running container.

The probe itself runs only inside a Lambda container (`make sam-local`); here its JSON is given, so each
rule is checked on a sound container and on the one fault it exists to catch.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from snapllm_dev.preflight.container import (
    ContainerTarget,
    ContainerView,
    check_environment,
    check_handler_module,
    check_layer_modules,
    check_layers_mounted,
    check_shadowing,
    run_container_rules,
)
from snapllm_dev.preflight.errors import ProbeError
from snapllm_dev.settings_doc import declared_variables

SYS_PATH = [
    "/var/task",
    "/opt/python/lib/python3.13/site-packages",
    "/opt/python",
    "/var/runtime",
    "/usr/lib/python313.zip",
    "/usr/lib/python3.13",
]
# What the probe reported for InferenceFunction in the x86_64 stand-in container (modules trimmed).
SOUND: dict[str, Any] = {
    "runtime": {"pid": 17, "cwd": "/var/task", "handler": "app.handler"},
    "environment": {
        "_HANDLER": "app.handler",
        "AWS_ENDPOINT_URL_S3": "http://172.17.0.1:52931",
        "SNAPLLM_MODEL_BUCKET": "snapllm-models-local",
        "SNAPLLM_MODEL_KEY": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SNAPLLM_MODEL_SHA256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "SNAPLLM_MODEL_NAME": "smollm2-135m-instruct",
        "SNAPLLM_N_CTX": "2048",
        "SNAPLLM_MAX_TOKENS": "512",
        "SNAPLLM_THREADS": "",
    },
    "sys_path": SYS_PATH,
    "modules": {
        "app": {"origin": "/var/task/app.py", "candidates": ["/var/task/app.py"]},
        "llama_cpp": {"origin": "/opt/python/llama_cpp/__init__.py", "candidates": ["/opt/python/llama_cpp"]},
        "snapllm": {"origin": "/opt/python/snapllm/__init__.py", "candidates": ["/opt/python/snapllm"]},
        "boto3": {"origin": "/var/runtime/boto3/__init__.py", "candidates": ["/var/runtime/boto3"]},
    },
    "opt_python": True,
}
TEMPLATE_VARIABLES = frozenset(name for name in SOUND["environment"] if name.startswith("SNAPLLM_"))


def target(probe: dict[str, Any], **changes: Any) -> ContainerTarget:
    return ContainerTarget(
        view=ContainerView.from_probe("InferenceFunction", probe),
        declared=changes.pop("declared", declared_variables("InferenceFunction")),
        template_variables=changes.pop("template_variables", TEMPLATE_VARIABLES),
        local_variables=frozenset({"AWS_ENDPOINT_URL_S3"}),
        **changes,
    )


def changed(**edits: Any) -> dict[str, Any]:
    probe = copy.deepcopy(SOUND)
    probe.update(edits)
    return probe


def errors(findings: list) -> list[str]:
    return [f.message for f in findings if f.severity == "error"]


def test_a_sound_container_has_no_errors():
    assert errors(run_container_rules([target(SOUND)])) == []


def test_layers_not_at_opt_python_are_an_error():
    assert errors(check_layers_mounted(target(changed(opt_python=False))))
    off_path = changed(sys_path=[p for p in SYS_PATH if p != "/opt/python"])
    assert (
        "/opt/python is not on the runtime's search path" in errors(check_layers_mounted(target(off_path)))[0]
    )
    # A function without layers needs none.
    assert check_layers_mounted(target(changed(opt_python=False), has_layers=False)) == []


def test_the_handler_module_must_come_from_the_task_root():
    elsewhere = changed()
    elsewhere["modules"]["app"] = {"origin": "/opt/python/app.py", "candidates": ["/opt/python/app.py"]}
    assert "resolves to /opt/python/app.py" in errors(check_handler_module(target(elsewhere)))[0]
    missing = changed()
    del missing["modules"]["app"]
    assert errors(check_handler_module(target(missing)))


def test_a_layer_module_resolving_elsewhere_is_an_error():
    # The runtime's path put before the layers: llama_cpp would import from a copy that is not the layer's.
    probe = changed()
    probe["modules"]["llama_cpp"] = {
        "origin": "/var/runtime/llama_cpp/__init__.py",
        "candidates": ["/var/runtime/llama_cpp", "/opt/python/llama_cpp"],
    }
    assert errors(check_layer_modules(target(probe))) == [
        "llama_cpp comes from the layers but resolves to /var/runtime/llama_cpp/__init__.py"
    ]


def test_shadowing_is_noted_except_over_the_runtimes_own_packages():
    probe = changed()
    probe["modules"]["typing_extensions"] = {
        "origin": "/var/task/typing_extensions.py",
        "candidates": ["/var/task/typing_extensions.py", "/opt/python/typing_extensions.py"],
    }
    probe["modules"]["boto3"] = {
        "origin": "/var/task/boto3/__init__.py",
        "candidates": ["/var/task/boto3", "/var/runtime/boto3"],
    }
    notes = [f.message for f in check_shadowing(target(probe))]
    assert notes == [
        "typing_extensions from /var/task/typing_extensions.py shadows /opt/python/typing_extensions.py"
    ]


def test_a_variable_the_code_never_reads_is_an_error():
    probe = changed()
    probe["environment"]["SNAPLLM_MODEL_NAMES"] = "typo"
    found = errors(
        check_environment(target(probe, template_variables=TEMPLATE_VARIABLES | {"SNAPLLM_MODEL_NAMES"}))
    )
    assert found == ["the template sets SNAPLLM_MODEL_NAMES, which the function never reads"]


def test_a_required_variable_the_template_does_not_set_is_an_error():
    probe = changed()
    del probe["environment"]["SNAPLLM_MODEL_KEY"]
    assert errors(check_environment(target(probe))) == [
        "the function needs SNAPLLM_MODEL_KEY, which the template does not set"
    ]


def test_optional_variables_left_unset_are_listed_as_one_note():
    notes = [f.message for f in check_environment(target(SOUND)) if f.severity == "note"]
    assert len(notes) == 1 and "SNAPLLM_S3_READ_TIMEOUT_S" in notes[0]


def test_a_function_without_declared_settings_is_noted_not_failed():
    findings = check_environment(target(SOUND, declared=None))
    assert [f.severity for f in findings] == ["note"]


def test_a_probe_that_found_no_runtime_raises():
    with pytest.raises(ProbeError, match="no runtime process"):
        ContainerView.from_probe(
            "InferenceFunction", {"error": "no runtime process (python -m awslambdaric)"}
        )

"""``snapllm local invoke``: mirrors ``sam local invoke`` without Docker, with the SnapStart lifecycle.

The function runs the way its kind says (:mod:`snapllm_dev.local.kinds`); ``--s3-fault SPEC`` puts the
fault proxy (:mod:`snapllm_dev.local.faults`) between it and the local S3. docs/testing.md ("The local
stack") says more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from snapllm.errors import SnapllmError
from snapllm_dev import sam
from snapllm_dev.local.durable_cli import invoke_durable
from snapllm_dev.local.environment import check_strict_variables
from snapllm_dev.local.faults import FaultProxy, FaultSpec, FaultSpecError, parse_fault
from snapllm_dev.local.kinds import Kind, kind_of
from snapllm_dev.local.lifecycle import InvokeResult, LocalFunctionError
from snapllm_dev.local.report import megabytes, seconds, table
from snapllm_dev.local.serve_cli import invoke_http_api
from snapllm_dev.local.session import LocalDeployment
from snapllm_dev.packaged_models import model_path
from snapllm_dev.sam import Function, Template


def _fault_specs(texts: list[str]) -> list[FaultSpec]:
    try:
        return [parse_fault(text) for text in texts]
    except FaultSpecError as exc:
        raise SnapllmError(f"--s3-fault: {exc}") from exc


def _fault_proxy(
    deployment: LocalDeployment, faults: list[FaultSpec]
) -> contextlib.AbstractContextManager[Any]:
    return FaultProxy(deployment.s3.endpoint_url, faults) if faults else contextlib.nullcontext()


def _report_faults(proxy: FaultProxy | None) -> None:
    if proxy is not None:
        print(f"S3 faults injected: {', '.join(proxy.fired) or 'none'}", file=sys.stderr)


def _read_event(path: Path | None) -> str:
    """The event file's JSON text, passed on as it is: the function's runtime decodes it, as on Lambda."""
    if path is None:
        return "{}"
    text = sys.stdin.read() if str(path) == "-" else path.read_text()
    try:
        json.loads(text)
    except ValueError as exc:
        raise SnapllmError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise SnapllmError(f"{path} nests too deeply to be decoded as JSON") from None
    return text


def run(args: argparse.Namespace) -> int:
    """``snapllm local invoke``: exit 2 on anything unusable in the arguments, the template or the
    function's configuration; 1 when the function fails otherwise."""
    try:
        faults = _fault_specs(args.s3_fault)
        check_strict_variables(dict(args.env))
        args.model = model_path(args.model) if args.model else None
        template = sam.load(args.template)
        function = template.function(args.function)
        kind = kind_of(template, function)
        if faults and kind is not Kind.DIRECT:
            raise SnapllmError("--s3-fault applies to functions that load the model at init")
        if kind is Kind.DURABLE:
            return invoke_durable(args, template, function)
        if kind is Kind.WEB_ADAPTER:
            raise SnapllmError(
                f"{function.name} runs under Lambda Web Adapter behind a Function URL: serve it with "
                "'snapllm local serve' and send it HTTP requests (POST /v1/chat/completions, "
                '"stream": true)'
            )
        event = _read_event(args.event)
    except (SnapllmError, OSError) as exc:
        print(f"snapllm local invoke: {exc}", file=sys.stderr)
        return 2
    if kind is Kind.HTTP_API:
        return invoke_http_api(args, template, function, event)
    return _invoke_direct(args, template, function, event, faults)


def _invoke_direct(
    args: argparse.Namespace, template: Template, function: Function, event: str, faults: list[FaultSpec]
) -> int:
    """Init, snapshot, restore and invoke ``function`` once, with the phase timings on stderr."""
    proxy: FaultProxy | None = None
    try:
        overrides = dict(args.env)
        with (
            LocalDeployment.start(template, model_path=args.model) as deployment,
            _fault_proxy(deployment, faults) as proxy,
            deployment.function(
                function.name,
                timeout_s=args.timeout,
                **{**({"AWS_ENDPOINT_URL_S3": proxy.url} if proxy else {}), **overrides},
            ) as local_function,
        ):
            init = local_function.init()
            snapshot = local_function.snapshot()
            with local_function.restore() as environment:
                result = environment.invoke_json(event)
                restore_s = environment.restore_s
    except LocalFunctionError as exc:
        _report_faults(proxy)
        print(f"snapllm local invoke: {exc}", file=sys.stderr)
        return 2 if exc.is_configuration_error else 1
    except (SnapllmError, OSError, ValueError) as exc:
        _report_faults(proxy)
        print(f"snapllm local invoke: {exc}", file=sys.stderr)
        return 2

    print(json.dumps(result.error or result.response, indent=2))
    print(_timing_table(init, snapshot, restore_s, result), file=sys.stderr)
    _report_faults(proxy)
    return 1 if result.error else 0


def _timing_table(
    init: dict[str, Any], snapshot: dict[str, Any], restore_s: float, result: InvokeResult
) -> str:
    phases = snapshot["phases"]
    rows = [
        ("init (module import + load)", seconds(init["init_s"])),
        ("  S3 -> memfd", seconds(phases.get("s3_to_memfd"))),
        ("  model load", seconds(phases.get("model_load"))),
        ("before-snapshot (warm-up)", seconds(snapshot["seconds"])),
        ("restore (after-restore hooks)", seconds(restore_s)),
        ("invoke", seconds(result.duration_s)),
    ]
    response = result.response if isinstance(result.response, dict) else {}
    timings = response.get("timings")
    if timings:
        rows += [
            ("  time to first token", f"{timings['time_to_first_token_ms']:.1f} ms"),
            ("  tokens/s", f"{timings['tokens_per_second']:.1f}"),
        ]
    rows += [
        ("RSS after init", megabytes(init["rss_bytes"])),
        ("peak RSS at snapshot", megabytes(snapshot["peak_rss_bytes"])),
    ]
    return table(rows, title="phases")

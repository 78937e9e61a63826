"""Everything `sam local` needs here besides Docker: the local S3 with the model and the agent's documents,
`sam local start-lambda` serving the model function to the router and the agent, the durable emulator,
and the files that hand their addresses to SAM (``SamLocalStage.start(build_dir, sam=..., host=...)``).

docs/testing.md says how the parts reach each other. The agent reads start-lambda's address from
``SNAPLLM_AGENT_INFERENCE_ENDPOINT_URL``: SAM points its ``AWS_ENDPOINT_URL_LAMBDA`` at the emulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from snapllm.errors import SnapllmError
from snapllm_dev import sam
from snapllm_dev.local.durable import agent_settings, upload_documents
from snapllm_dev.local.environment import function_environment
from snapllm_dev.local.kinds import MODEL_NAME_VARIABLE, Kind, model_function, of_kind, one_of_kind
from snapllm_dev.local.processes import Closing, stop_process
from snapllm_dev.local.s3 import LOCAL_CREDENTIALS, LocalS3, free_port
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment
from snapllm_dev.local.stack import AGENT_DOCUMENTS
from snapllm_dev.sam import Function, Template
from snapllm_dev.samlocal.samcli import SamCli, remove_orphaned_build_locks

OVERLAY_NAME = "template.sam-local.json"
ENV_VARS_NAME = "env.sam-local.json"
#: The variable the SAM CLI reads to use a durable emulator started outside Docker.
EXTERNAL_EMULATOR_PORT = "DURABLE_EXECUTIONS_EXTERNAL_EMULATOR_PORT"
WARM_UP_EVENT = Path("events/inference/completion.json")
#: Lambda's names of the machine architectures this runs on.
_HOST_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
#: The model function's timeout under an emulated architecture (qemu-user): its one invoke runs the init
#: (imports, the model from S3, its load) and a first request at a few percent of native speed, minutes
#: where the template's 120 s fit natively. Below the 600 s the SAM CLI's invoke is given.
EMULATED_INVOKE_TIMEOUT_S = 540
#: The variable that sets how long the SAM CLI waits for a new container's runtime interface emulator to
#: listen (20 s by default), and its value under emulation, where the emulator itself starts under qemu.
CONNECTION_TIMEOUT_VARIABLE = "SAM_CLI_CONTAINER_CONNECTION_TIMEOUT"
EMULATED_CONNECTION_TIMEOUT_S = 120


class StageError(SnapllmError):
    """A part of the local stage did not start."""


@dataclass(frozen=True)
class Roles:
    """Which function of the template plays which part, read from the template (never from names)."""

    model: Function
    router: Function
    agent: Function
    web_adapter: Function | None

    @classmethod
    def of(cls, template: Template) -> Roles:
        router = one_of_kind(template, Kind.HTTP_API)
        return cls(
            model=model_function(template, callers=[router]),
            router=router,
            agent=one_of_kind(template, Kind.DURABLE, named_by=[router]),
            web_adapter=next(iter(of_kind(template, Kind.WEB_ADAPTER)), None),
        )


@dataclass
class SamLocalStage(Closing):
    """The running parts, the SAM CLI wired to them, and the variables each function was given."""

    sam: SamCli
    template: Template
    roles: Roles
    variables: dict[str, dict[str, str]]
    local_only: frozenset[str]
    lambda_endpoint: str
    #: The web-adapter function's complete variables (it runs outside SAM, see snapllm_dev.samlocal.webapp).
    web_adapter_variables: dict[str, str]
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @classmethod
    def start(
        cls,
        build_dir: Path,
        *,
        sam_cli: Path,
        host: str,
        logs: Path,
        arch: str,
        model_path: Path | None = None,
        warm_up: bool = True,
    ) -> SamLocalStage:
        template = sam.load(build_dir / "template.yaml", overrides={"Architecture": arch, "ApiAuth": "IAM"})
        roles = Roles.of(template)
        logs.mkdir(parents=True, exist_ok=True)
        remove_orphaned_build_locks()
        with contextlib.ExitStack() as resources:
            s3 = resources.enter_context(LocalS3.start(host=host))
            deployment = LocalDeployment.start(template, model_path=model_path, s3=s3)
            lambda_port, emulator_port = free_port(host), free_port()
            lambda_endpoint = f"http://{host}:{lambda_port}"
            variables = _variables(template, roles, deployment, lambda_endpoint)
            upload_documents(s3, agent_settings(template, roles.agent), Path.cwd() / AGENT_DOCUMENTS)
            local_only = _local_only(template, variables)
            overlay = _write_overlay(build_dir, local_only, variables)
            env_vars = build_dir / ENV_VARS_NAME
            env_vars.write_text(json.dumps(variables, indent=2, sort_keys=True))
            cli = SamCli(
                sam_cli,
                template=overlay,
                env_vars=env_vars,
                container_host=host,
                # The router's recorded events carry no authorizer verdict, and SAM plays no Parameter
                # Store: the functions run as behind IAM, which API Gateway checks before any function.
                parameter_overrides={"Architecture": arch, "ApiAuth": "IAM", **_timeouts(arch)},
                environment={EXTERNAL_EMULATOR_PORT: str(emulator_port), **_connection_timeout(arch)},
            )
            # The durable emulator must be reachable from SAM (127.0.0.1) and from the agent's container
            # (the bridge gateway): it listens on both.
            emulator = _start(
                [
                    str(Path(sys.executable).parent / "dex-local-runner"),
                    "start-server",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    str(emulator_port),
                    "--log-level",
                    "WARNING",
                ],
                logs / "durable-emulator.log",
            )
            resources.callback(stop_process, emulator)
            _wait_for_port("127.0.0.1", emulator_port, emulator, "the durable emulator", logs)
            lambdas = cli.start_lambda(host=host, port=lambda_port, log=logs / "start-lambda.log")
            resources.callback(stop_process, lambdas)
            _wait_for_port(host, lambda_port, lambdas, "sam local start-lambda", logs, timeout_s=120)
            owned = resources.pop_all()
        stage = cls(
            cli,
            template,
            roles,
            variables,
            frozenset(chain.from_iterable(local_only.values())),
            lambda_endpoint,
            _web_adapter_variables(roles, deployment, variables),
            owned,
        )
        if not warm_up:
            return stage
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(stage.close)
            # The model's container starts before the router and the agent call it, as a published SnapStart
            # version is initialized before its first request: their first call is not a container start.
            stage.invoke_warm(roles.model.name, WARM_UP_EVENT)
            cleanup.pop_all()
        return stage

    def invoke_warm(self, function: str, event: Path) -> Any:
        """One invoke through ``start-lambda``, whose container for ``function`` then stays warm."""
        # start-lambda checks no signature; the client needs some credentials to sign with.
        client = boto3.client(
            "lambda",
            endpoint_url=self.lambda_endpoint,
            region_name=LOCAL_CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(read_timeout=300, retries={"total_max_attempts": 1}),
        )
        try:
            response = client.invoke(FunctionName=function, Payload=event.read_bytes())
        except (ClientError, BotoCoreError) as exc:
            raise StageError(
                f"sam local start-lambda could not invoke {function}: {exc}; see its log"
            ) from None
        return json.loads(response["Payload"].read() or b"null")

    def close(self) -> None:
        self.resources.close()


def _variables(
    template: Template, roles: Roles, deployment: LocalDeployment, lambda_endpoint: str
) -> dict[str, dict[str, str]]:
    """``--env-vars`` content: each function's local values, by logical ID."""
    s3_endpoint = {"AWS_ENDPOINT_URL_S3": deployment.s3.endpoint_url}
    model = {
        name: value
        for name, value in deployment.local_values(roles.model).items()
        # SAM passes the container credentials of its own (moto accepts any).
        if not name.startswith("AWS_") or name == "AWS_ENDPOINT_URL_S3"
    }
    model_name = model.get(MODEL_NAME_VARIABLE) or str(
        roles.model.environment.get(MODEL_NAME_VARIABLE) or roles.model.name
    )
    model["SNAPLLM_MODEL_SHA256"] = deployment.model_sha256
    # ggml's threads spin-wait on each other: with the SAM CLI, the emulators and Docker busy on the same
    # cores, one generation thread keeps a local run's timings sane (on Lambda the template's value applies).
    model["SNAPLLM_THREADS"] = "1"
    return {
        roles.model.name: model,
        roles.router.name: {
            **s3_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint,
            "SNAPLLM_ROUTES": json.dumps({model_name: roles.model.name}),
            "SNAPLLM_AGENT_FUNCTION_ARN": roles.agent.name,
            "SNAPLLM_AGENT_ARTIFACTS_BUCKET": LOCAL_MODEL_BUCKET,
        },
        roles.agent.name: {
            **s3_endpoint,
            "SNAPLLM_AGENT_ARTIFACTS_BUCKET": LOCAL_MODEL_BUCKET,
            "SNAPLLM_AGENT_INFERENCE_FUNCTION": roles.model.name,
            "SNAPLLM_AGENT_INFERENCE_ENDPOINT_URL": lambda_endpoint,
        },
    }


def _web_adapter_variables(
    roles: Roles, deployment: LocalDeployment, variables: dict[str, dict[str, str]]
) -> dict[str, str]:
    """Everything the web-adapter function runs with: no SAM merges the template's values with the local
    ones, or gives it credentials (moto takes any); the model values are the model function's."""
    if roles.web_adapter is None:
        return {}
    local = {**deployment.local_values(roles.web_adapter), **variables[roles.model.name]}
    return function_environment(roles.web_adapter, local=local, environ={})


def _emulated(arch: str) -> bool:
    """Whether ``arch``'s containers run under emulation on this machine."""
    return _HOST_ARCHITECTURES.get(platform.machine().lower()) != arch


def _timeouts(arch: str) -> dict[str, str]:
    """The parameter overrides that give an emulated architecture's invoke time to finish."""
    return {"InferenceTimeout": str(EMULATED_INVOKE_TIMEOUT_S)} if _emulated(arch) else {}


def _connection_timeout(arch: str) -> dict[str, str]:
    """The SAM CLI's environment that gives an emulated container's runtime interface emulator time to start
    listening (the Docker engine refuses connections until it does: scripts/docker-daemon.sh)."""
    return {CONNECTION_TIMEOUT_VARIABLE: str(EMULATED_CONNECTION_TIMEOUT_S)} if _emulated(arch) else {}


def _local_only(template: Template, variables: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Per function, the local variables its template does not declare (SAM would drop them)."""
    return {
        name: sorted(set(values) - set(template.function(name).environment))
        for name, values in variables.items()
    }


def _write_overlay(
    build_dir: Path, local_only: dict[str, list[str]], variables: dict[str, dict[str, str]]
) -> Path:
    """The built template with the local-only variables declared, beside it (its paths are relative)."""
    document = sam.read(build_dir / "template.yaml")
    for name, added in local_only.items():
        properties = document["Resources"][name].setdefault("Properties", {})
        declared = properties.setdefault("Environment", {}).setdefault("Variables", {})
        for variable in added:
            declared[variable] = ""
    path = build_dir / OVERLAY_NAME
    path.write_text(json.dumps(document, indent=1))
    return path


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **LOCAL_CREDENTIALS}
        )


def _wait_for_port(
    host: str,
    port: int,
    process: subprocess.Popen[bytes],
    what: str,
    logs: Path,
    *,
    timeout_s: float = 60,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StageError(f"{what} exited with {process.returncode}; see {logs}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.2)
    raise StageError(f"{what} did not listen on {host}:{port} within {timeout_s:g} s; see {logs}")

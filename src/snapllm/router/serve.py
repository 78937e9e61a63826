"""``snapllm local serve``: the deployed HTTP surface on 127.0.0.1, without Docker or AWS.

    with LocalStack.start(Path("template.yaml")) as stack:
        serve(stack, port=3000)   # http://127.0.0.1:3000/v1 for any OpenAI client

One local gateway plays both front doors of a deployment:

- like API Gateway, it turns each request into an HTTP API (payload 2.0) event and calls the real router
  handler (:class:`~snapllm.router.app.RouterApp`, Logger/Tracer/Metrics included), whose inference
  client invokes an environment of InferenceFunction restored from a local snapshot;
- like the streaming Function URL with Lambda Web Adapter, it forwards completions with
  ``"stream": true`` to StreamFunction's ASGI app, which runs under uvicorn in its own process (module
  init, then LWA's readiness check and before-checkpoint / after-restore hook calls, as on AWS).

On AWS the two are different URLs: the HTTP API buffers, only the Function URL streams.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from snapllm.agent import routes as agent_routes
from snapllm.agent.local import LocalAgent, agent_settings
from snapllm.agent.runs import AgentRuns
from snapllm.edge import check_body_size, check_headers, decode_json
from snapllm.errors import RequestError, SnapllmError
from snapllm.inference_client import LocalInferenceClient
from snapllm.local.context import LocalContext
from snapllm.local.lifecycle import LocalFunction, RestoredEnvironment
from snapllm.local.processes import stop_process
from snapllm.local.s3 import free_port
from snapllm.local.session import LocalDeployment
from snapllm.local.template import FunctionSpec
from snapllm.router.app import RouterApp
from snapllm.router.config import RouterSettings
from snapllm.router.events import http_api_event
from snapllm.streaming.app import AFTER_RESTORE_PATH, BEFORE_CHECKPOINT_PATH

ROUTER_FUNCTION = "RouterFunction"
INFERENCE_FUNCTION = "InferenceFunction"
STREAM_FUNCTION = "StreamFunction"
AGENT_DOCUMENTS = Path("events/agent/documents")
STREAMING_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
HOOK_PATHS = frozenset({BEFORE_CHECKPOINT_PATH, AFTER_RESTORE_PATH})
# API Gateway HTTP APIs refuse bodies over 10 MB before any function runs.
API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
_HOP_BY_HOP = frozenset({"host", "content-length", "connection", "transfer-encoding", "keep-alive"})


class LocalServeError(SnapllmError):
    """A part of the local stack did not start."""


def _plain_environment(spec: FunctionSpec) -> dict[str, str]:
    """The template's variables that resolved to plain values (intrinsics are supplied locally)."""
    return {k: "" if v is None else str(v) for k, v in spec.environment.items() if not isinstance(v, dict)}


def _overrides(prefixes: tuple[str, ...] = ("SNAPLLM_", "POWERTOOLS_")) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


class StreamFunctionProcess:
    """StreamFunction's ASGI app under uvicorn on a loopback port, driven through LWA's lifecycle."""

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    @classmethod
    def start(
        cls, spec: FunctionSpec, environment: Mapping[str, str], *, timeout_s: float = 120.0
    ) -> StreamFunctionProcess:
        port = free_port()
        env = {
            **os.environ,
            **_plain_environment(spec),
            **environment,
            "PORT": str(port),
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "SNAPLLM_STREAM_TIMEOUT_S": str(spec.timeout_s),
        }
        env.pop("AWS_LAMBDA_EXEC_WRAPPER", None)  # /opt/bootstrap is LWA's, which exists only on Lambda
        command = [
            sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
            "--no-access-log", "--log-level", "warning", "--app-dir", str(spec.code_dir), "app:app",
        ]  # fmt: skip
        process = subprocess.Popen(command, env=env, stdout=sys.stderr.fileno())
        function = cls(process, f"http://127.0.0.1:{port}")
        try:
            function._lifecycle(timeout_s)
        except BaseException:
            function.stop()
            raise
        return function

    def _lifecycle(self, timeout_s: float) -> None:
        # What LWA does on AWS: wait for the readiness check, then (SnapStart) the before-checkpoint hook,
        # the snapshot, the restore and the after-restore hook. Locally the process is not forked between.
        deadline = time.monotonic() + timeout_s
        with httpx.Client(base_url=self.url, timeout=timeout_s) as client:
            while True:
                if self.process.poll() is not None:
                    raise LocalServeError(
                        f"{STREAM_FUNCTION} exited during init (code {self.process.returncode})"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise LocalServeError(f"{STREAM_FUNCTION} was not ready within {timeout_s:g} s")
                time.sleep(0.1)
            for path in (BEFORE_CHECKPOINT_PATH, AFTER_RESTORE_PATH):
                response = client.post(path)
                if response.status_code // 100 != 2:
                    raise LocalServeError(f"{STREAM_FUNCTION} hook {path} answered {response.status_code}")

    def stop(self) -> None:
        stop_process(self.process)


@dataclass
class LocalStack:
    """Local S3 with the model, a restored InferenceFunction environment, StreamFunction, the router, and
    durable agent runs (the SDK's testing runner) behind the router's ``/v1/agent/runs``."""

    deployment: LocalDeployment
    inference: LocalFunction
    environment: RestoredEnvironment
    router: RouterApp
    stream: StreamFunctionProcess | None
    model: str
    timings: dict[str, float] = field(default_factory=dict)
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @classmethod
    def start(cls, template: Path, *, model_path: Path | None = None, streaming: bool = True) -> LocalStack:
        timings: dict[str, float] = {}
        started = time.perf_counter()
        with contextlib.ExitStack() as resources:
            deployment = resources.enter_context(LocalDeployment.start(template, model_path=model_path))
            inference = resources.enter_context(deployment.function(INFERENCE_FUNCTION))
            inference.init()
            inference.snapshot()
            environment = resources.enter_context(inference.restore())
            timings["inference_ready_s"] = time.perf_counter() - started
            model = deployment.environment().get("SNAPLLM_MODEL_NAME") or str(
                FunctionSpec.from_template(template, INFERENCE_FUNCTION).environment["SNAPLLM_MODEL_NAME"]
            )
            # One client, so the router's and the agent's requests queue for the one environment.
            client = LocalInferenceClient(environment)
            resources.enter_context(_agent_runs(template, deployment, client))
            router = cls._router(template, model, client)
            stream = None
            if streaming:
                spec = FunctionSpec.from_template(template, STREAM_FUNCTION)
                stream = StreamFunctionProcess.start(spec, deployment.environment())
                resources.callback(stream.stop)
                timings["stream_ready_s"] = time.perf_counter() - started
            # A failing step stops what started before it; once all are up, the stack owns them.
            owned = resources.pop_all()
            stack = cls(deployment, inference, environment, router, stream, model, timings, owned)
        return stack

    @staticmethod
    def _router(template: Path, model: str, client: LocalInferenceClient) -> RouterApp:
        spec = FunctionSpec.from_template(template, ROUTER_FUNCTION)
        env = {
            **_plain_environment(spec),
            **_overrides(),
            # The template's routing table names the deployed alias; locally the model routes to the
            # restored environment.
            "SNAPLLM_ROUTES": json.dumps({model: f"local:{INFERENCE_FUNCTION}"}),
        }
        return RouterApp(RouterSettings.from_env(env), {model: client}, routers=[agent_routes.router])

    def close(self) -> None:
        self.resources.close()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _agent_runs(template: Path, deployment: LocalDeployment, client: LocalInferenceClient) -> Iterator[None]:
    """Serve ``/v1/agent/runs`` from durable executions of the agent in this process.

    The documents next to the agent's events are uploaded first, so ``events/agent/review.json`` can be
    posted as it is.
    """
    agent = LocalAgent(deployment, agent_settings(template), client)
    documents = template.parent / AGENT_DOCUMENTS
    if documents.is_dir():
        agent.upload_documents(documents)
    with agent.durable_service() as service:
        agent_routes.configure(AgentRuns(service, function_arn=service.function_arn))
        try:
            yield
        finally:
            agent_routes.configure(None)


class LocalGateway:
    """The ASGI app of ``snapllm local serve``: API Gateway + router, or Function URL + LWA for streams."""

    def __init__(self, router: RouterApp, *, stream_url: str | None, memory_mb: int = 256) -> None:
        self.router = router
        self.stream_url = stream_url
        self.memory_mb = memory_mb
        # One Lambda environment answers one request at a time; the resolver keeps per-request state.
        self._lock = threading.Lock()
        self._http = (
            httpx.AsyncClient(base_url=stream_url, timeout=httpx.Timeout(None)) if stream_url else None
        )
        self.app = Starlette()  # lifespan only: every HTTP request goes to endpoint()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # No Starlette routing: a route pattern would answer some paths (e.g. with an encoded newline)
        # itself, in plain text, where API Gateway passes every path to the router.
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)

    def invoke_router(self, event: dict[str, Any]) -> dict[str, Any]:
        context = LocalContext.create(ROUTER_FUNCTION, timeout_s=30, memory_mb=self.memory_mb)
        request = event.get("requestContext")
        request_id = request.get("requestId") if isinstance(request, dict) else None
        if isinstance(request_id, str) and request_id:
            context.aws_request_id = request_id  # as on Lambda, the log's request id is API Gateway's
        with self._lock:
            return self.router.handler(event, context)

    async def endpoint(self, request: Request) -> Response:
        try:
            # What API Gateway refuses itself, before any function runs.
            check_headers(request.headers.items())
            body = await request.body()
            check_body_size(len(body), max_bytes=API_GATEWAY_MAX_BODY_BYTES)
        except RequestError as error:
            return JSONResponse(error.to_body(), status_code=error.status_code)
        except ClientDisconnect:
            return Response(status_code=400)  # the client left mid-upload: nobody reads the answer
        # The path as the client sent it (decoded): request.url.path would drop a decoded "\n" or "\t", as
        # URL parsing does, and serve "/v1/chat/completions%0A" as if it were "/v1/chat/completions".
        path = request.scope["path"]
        if path in HOOK_PATHS:
            return Response(status_code=403)  # as LWA: hook paths are not reachable from outside
        if self._http is not None and request.method == "POST" and path in STREAMING_PATHS and _streams(body):
            return await self._forward(request, body)
        event = http_api_event(
            request.method,
            path,
            body=body,
            headers=request.headers.items(),
            query=request.url.query,
            source_ip=request.client.host if request.client else "127.0.0.1",
        )
        result = await anyio.to_thread.run_sync(self.invoke_router, event)
        return _http_response(result)

    async def _forward(self, request: Request, body: bytes) -> Response:
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        # LWA marks requests that came through an invoke; the app refuses its hooks to such requests.
        headers["x-amzn-request-context"] = json.dumps({"http": {"method": "POST", "path": request.url.path}})
        upstream = self._http.build_request("POST", request.url.path, content=body, headers=headers)
        response = await self._http.send(upstream, stream=True)
        passed = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=passed,
            background=BackgroundTask(response.aclose),
        )


def _streams(body: bytes) -> bool:
    try:
        parsed = decode_json(body)
    except RequestError:
        return False  # the router answers what the body is wrong with
    return isinstance(parsed, dict) and parsed.get("stream") is True


def _http_response(result: Mapping[str, Any]) -> Response:
    raw = result.get("body") or ""
    content = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
    response = Response(content=content, status_code=int(result.get("statusCode", 200)))
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    for cookie in result.get("cookies") or []:
        response.headers.append("set-cookie", cookie)
    return response


def serve(stack: LocalStack, *, port: int = 3000, host: str = "127.0.0.1") -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM)."""
    import uvicorn

    gateway = LocalGateway(stack.router, stream_url=stack.stream.url if stack.stream else None)
    print(
        f"snapllm: serving model {stack.model!r} on http://{host}:{port}/v1 "
        f"(streaming {'on' if stack.stream else 'off'}); Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(gateway, host=host, port=port, log_level="warning", access_log=False)


class ServeProcess:
    """``snapllm local serve`` in a child process, for tests and benchmarks that need a real server.

    with ServeProcess.start(env={"SNAPLLM_THREADS": "1"}) as server:
        OpenAI(base_url=server.base_url, api_key="local")
    """

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.url}/v1"

    @classmethod
    def start(
        cls,
        *,
        template: Path = Path("template.yaml"),
        env: Mapping[str, str] | None = None,
        timeout_s: float = 180.0,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = None,
    ) -> ServeProcess:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "snapllm.cli",
            "local",
            "serve",
            "--port",
            str(port),
            "-t",
            str(template),
        ]
        process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=stdout, stderr=stderr)
        server = cls(process, port)
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise LocalServeError(f"snapllm local serve exited with {process.returncode} while starting")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    return server
            if time.monotonic() > deadline:
                server.stop()
                raise LocalServeError(f"snapllm local serve was not ready within {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self) -> None:
        stop_process(self.process, timeout_s=20)

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

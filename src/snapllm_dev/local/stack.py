"""The local stack: every function of the template that ``snapllm local serve`` puts behind one port.

    with LocalStack.start(sam.load(Path("template.yaml"))) as stack:
        stack.router.handler(http_api_event("GET", "/v1/models"), context)

The model function is restored once, and one client of it serves the router and the agent; which function
plays which part is read from the template (:mod:`snapllm_dev.local.kinds`). docs/testing.md has more.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aws_lambda_powertools import Logger

from snapllm.agent import routes as agent_routes
from snapllm.api_keys import LOCAL_REALM, ApiKeyVerifier, FileKeyStore
from snapllm.engine.settings import EmbeddingPooling
from snapllm.inference.client import HttpInferenceClient, InferenceClient
from snapllm.router.app import RouterApp
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.cors import CorsPolicies
from snapllm_dev.local.durable import LocalAgent, agent_runs, agent_settings
from snapllm_dev.local.environment import function_environment
from snapllm_dev.local.inference import LocalInferenceClient
from snapllm_dev.local.kinds import (
    MODEL_KEY_VARIABLE,
    MODEL_NAME_VARIABLE,
    Kind,
    model_function,
    of_kind,
    one_of_kind,
)
from snapllm_dev.local.lifecycle import RestoredEnvironment
from snapllm_dev.local.lwa import WebAdapterProcess, default_start_timeout_s
from snapllm_dev.local.processes import Closing
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment, model_naming
from snapllm_dev.sam import Function, Template

# Posted as they are by events/agent/review.json, which names these files on the local S3.
AGENT_DOCUMENTS = Path("events/agent/documents")


@dataclass(frozen=True)
class EmbeddingModel:
    """An embedding model to serve beside the chat model: its own environment of the model function (as a
    deployment gives it a function of its own), loaded in embedding mode and routed by ``name``."""

    path: Path
    name: str
    pooling: EmbeddingPooling = "model"


@dataclass
class LocalStack(Closing):
    """The router and the web-adapter function in front of the parts ``resources`` holds: local S3 with the
    model, a restored model-function environment, durable agent runs behind ``/v1/agent/runs``.

    ``model_environment`` (of ``model_function``) and ``agent`` are the ones the router uses, for callers
    that invoke them directly (``snapllm replay``).
    """

    router: RouterApp
    router_function: Function
    stream: WebAdapterProcess | None
    model: str
    model_function: Function
    model_environment: RestoredEnvironment
    agent: LocalAgent | None
    #: ApiAuth=KEY: the keys the gateway's authorizer checks (the streaming app checks the same file).
    api_keys: ApiKeyVerifier | None = None
    #: The CORS of the template's HTTP API and Function URL (none unless it is loaded with origins).
    cors: CorsPolicies = field(default_factory=CorsPolicies)
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @classmethod
    def start(
        cls,
        template: Template,
        router_function: Function | None = None,
        *,
        model_path: Path | None = None,
        streaming: bool = True,
        endpoints: Mapping[str, str] | None = None,
        fallbacks: Mapping[str, Sequence[str]] | None = None,
        agent_overrides: Mapping[str, str] | None = None,
        embedding: EmbeddingModel | None = None,
        api_keys_file: Path | None = None,
        start_timeout_s: float | None = None,
    ) -> LocalStack:
        """Start every part (a part that fails stops the ones started before it) for ``router_function``, the
        HTTP API function to serve (default: the template's first); ConfigurationError if there is none or
        no model function.

        ``endpoints`` adds routes to always-on OpenAI-compatible servers (``{"name": "http://host:port/v1"}``)
        beside the model function's; ``fallbacks`` is the router's fallback order over all of them;
        ``agent_overrides`` are variables of the agent function (``SNAPLLM_AGENT_MCP_SERVERS``...);
        ``api_keys_file`` (records, :class:`~snapllm.api_keys.FileKeyStore`) plays ``ApiAuth=KEY``: without
        it nothing is checked, as no SigV4 is locally; ``embedding`` adds an embedding model's route;
        ``start_timeout_s`` bounds each phase of the web-adapter function's start (default: by the model's
        size, :func:`~snapllm_dev.local.lwa.default_start_timeout_s`)."""
        api_keys = (
            ApiKeyVerifier(FileKeyStore.read(api_keys_file), realm=LOCAL_REALM) if api_keys_file else None
        )
        auth = "KEY" if api_keys else "IAM"
        router_function = router_function or one_of_kind(template, Kind.HTTP_API)
        durable = of_kind(template, Kind.DURABLE)
        agent_function = one_of_kind(template, Kind.DURABLE, named_by=[router_function]) if durable else None
        model_fn = model_function(template, callers=[router_function])
        # The router's settings, checked before anything starts (the same check runs on the built router).
        named = model_naming(model_path).get(MODEL_NAME_VARIABLE) or function_environment(
            model_fn, wired=tuple(model_fn.environment)
        ).get(MODEL_NAME_VARIABLE)
        models = {embedding.name: f"local:{embedding.name}"} if embedding else {}
        cls._router_settings(
            router_function,
            named or model_fn.name,
            model_fn,
            {**models, **(endpoints or {})},
            fallbacks or {},
            auth,
        )
        with contextlib.ExitStack() as resources:
            deployment = resources.enter_context(LocalDeployment.start(template, model_path=model_path))
            # The web-adapter function loads its own copy of the model: its process starts first, so its
            # init runs beside the model function's.
            stream = None
            web_adapter = of_kind(template, Kind.WEB_ADAPTER)
            if streaming and web_adapter:
                keys = {"SNAPLLM_API_KEYS_FILE": str(api_keys_file or "")}
                stream = cls._web_adapter(deployment, web_adapter[0], keys, start_timeout_s)
                resources.callback(stream.stop)
            inference = resources.enter_context(deployment.function(model_fn.name))
            inference.init()
            inference.snapshot()
            environment = resources.enter_context(inference.restore())
            model = inference.environment.get(MODEL_NAME_VARIABLE) or model_fn.name
            # One client, so the router's and the agent's requests queue for the one environment.
            client = LocalInferenceClient(environment)
            agent = None
            if agent_function is not None:
                settings = agent_settings(template, agent_function, **(agent_overrides or {}))
                agent = LocalAgent(deployment, settings, client)
                resources.enter_context(agent_runs(agent, template.path.parent / AGENT_DOCUMENTS))
            others: dict[str, InferenceClient] = {}
            if embedding is not None:
                others[embedding.name] = LocalInferenceClient(
                    resources.enter_context(cls._embedding_environment(deployment, model_fn, embedding))
                )
            router = cls._router(
                router_function, model, model_fn, client, endpoints or {}, fallbacks or {}, auth, others
            )
            if stream is not None:
                stream.wait_ready()
            # Once all are up, the stack owns them.
            owned = resources.pop_all()
        return cls(
            router,
            router_function,
            stream,
            model,
            model_fn,
            environment,
            agent,
            api_keys,
            cors=CorsPolicies.of(template),
            resources=owned,
        )

    @staticmethod
    @contextlib.contextmanager
    def _embedding_environment(
        deployment: LocalDeployment, model_fn: Function, embedding: EmbeddingModel
    ) -> Iterator[RestoredEnvironment]:
        """The model function restored with ``embedding`` loaded in embedding mode (its file uploaded
        under a key of its own when it is not the chat model's)."""
        overrides = {MODEL_NAME_VARIABLE: embedding.name, "SNAPLLM_EMBEDDING_POOLING": embedding.pooling}
        if embedding.path.resolve() != deployment.model_path.resolve():
            key = f"embedding/{embedding.path.name}"
            digest = deployment.s3.put_model(embedding.path, bucket=LOCAL_MODEL_BUCKET, key=key)
            overrides |= {MODEL_KEY_VARIABLE: key, "SNAPLLM_MODEL_SHA256": digest}
        with deployment.function(model_fn.name, **overrides) as function:
            function.init()
            function.snapshot()
            with function.restore() as environment:
                yield environment

    @staticmethod
    def _router(
        function: Function,
        model: str,
        model_fn: Function,
        client: LocalInferenceClient,
        endpoints: Mapping[str, str],
        fallbacks: Mapping[str, Sequence[str]],
        auth: str,
        others: Mapping[str, InferenceClient],
    ) -> RouterApp:
        locals_ = {name: f"local:{name}" for name in others}
        settings = LocalStack._router_settings(
            function, model, model_fn, {**locals_, **endpoints}, fallbacks, auth
        )
        clients: dict[str, InferenceClient] = {model: client, **others}
        for name, url in endpoints.items():
            clients[name] = HttpInferenceClient(url, read_timeout_s=settings.invoke_timeout_s)
        # The router logs to stdout as on Lambda, but to the stdout of each record's moment: Powertools keeps
        # one handler per service for the process's life, and a command that redirects stdout while it
        # runs (``snapllm replay``) or runs twice in one process must not leave it writing to a stream gone.
        logger = Logger(service=settings.service, stream=_CurrentStdout())
        return RouterApp(settings, clients, logger=logger, routers=[agent_routes.router])

    @staticmethod
    def _router_settings(
        function: Function,
        model: str,
        model_fn: Function,
        endpoints: Mapping[str, str],
        fallbacks: Mapping[str, Sequence[str]],
        auth: str,
    ) -> RouterSettings:
        routes = {model: f"local:{model_fn.name}", **endpoints}
        env = function_environment(
            function,
            # The template's routing table names the deployed alias; locally the model routes to the
            # restored environment. The agent's alias and run records are wired by agent_runs().
            overrides={
                "SNAPLLM_ROUTES": json.dumps(routes),
                "SNAPLLM_FALLBACKS": json.dumps({name: list(order) for name, order in fallbacks.items()}),
                # The template's default names its own model; locally the model served is the default.
                "SNAPLLM_DEFAULT_MODEL": model,
                # KEY with local keys (the gateway plays the authorizer); else nothing checks callers.
                "SNAPLLM_API_AUTH": auth,
            },
            wired=("SNAPLLM_AGENT_FUNCTION_ARN", "SNAPLLM_AGENT_ARTIFACTS_BUCKET"),
        )
        return RouterSettings.from_env(env)

    @staticmethod
    def _web_adapter(
        deployment: LocalDeployment,
        function: Function,
        keys: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> WebAdapterProcess:
        env = function_environment(
            function,
            local=deployment.local_values(function),
            # Keys come from the local file (or none), never from Parameter Store.
            overrides={
                "SNAPLLM_STREAM_TIMEOUT_S": str(function.timeout_s),
                "SNAPLLM_API_KEY_PARAMETER_PATH": "",
                **keys,
            },
        )
        if timeout_s is None:
            timeout_s = default_start_timeout_s(deployment.model_path.stat().st_size)
        return WebAdapterProcess.launch(function, env, timeout_s=timeout_s)

    def close(self) -> None:
        self.resources.close()


class _CurrentStdout:
    """``sys.stdout`` as it is at each write (as ``print()`` finds it), for a log handler."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

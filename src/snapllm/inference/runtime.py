"""The inference function's lifecycle: init, SnapStart hooks, invoke (``functions/inference/app.py``).

    runtime = InferenceRuntime.initialize()      # S3 -> memfd -> llama.cpp, at module init
    runtime.register_snapstart_hooks()           # warm-up before the snapshot, re-seed after restore
    runtime.handle(event, context)               # the handler: only generates tokens

Init downloads and loads; a request never does. Errors are answers: a 4xx, or a 500 without a stack trace.
"""

from __future__ import annotations

import gc
import logging
import random
import sys
import time
import uuid
from typing import Any

from snapshot_restore_py import register_after_restore, register_before_snapshot

from snapllm.engine.constraint import start_grammar_thread, stop_grammar_thread
from snapllm.engine.embedding import EmbeddingEngine
from snapllm.engine.loader import DownloadStats, S3ModelLoader
from snapllm.engine.model import Engine
from snapllm.engine.prefault import PrefaultStats, prefault
from snapllm.errors import ConfigurationError, RequestError, ServerError, UnsupportedParameterError
from snapllm.inference.deadline import invoke_deadline
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.constraints.compiled_schema import start_schema_thread, stop_schema_thread
from snapllm.protocol.http.routes import EMBEDDINGS, RERANK, routed_event
from snapllm.protocol.model_routes.embeddings import EmbeddingLimits, EmbeddingServing
from snapllm.protocol.model_routes.model_routes import ModelRoutes, split_event
from snapllm.protocol.model_routes.rerank import RerankServing
from snapllm.protocol.prefixes import BUNDLED, MAX_PREFIXES_BYTES, declared_file, read_prefixes
from snapllm.protocol.requests import require_object
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import peak_rss_bytes, rss_bytes
from snapllm.timing import phases

logger = logging.getLogger("snapllm.inference")
#: The texts an embedding model's before-snapshot warm-up embeds, in one batch.
EMBEDDING_WARMUP = ("Hello.", "A second, longer text to embed alongside the first one.")
#: The request a reranker's before-snapshot warm-up scores: a query and two documents, in one batch.
RERANK_WARMUP = {"query": "Hello?", "documents": list(EMBEDDING_WARMUP)}


def read_declared_prefixes(settings: InferenceSettings, loader: S3ModelLoader) -> list[dict[str, Any]]:
    """The entries of ``SNAPLLM_PROMPT_PREFIXES``: prefixes snapllm ships (``snapllm:NAME``), a file (an
    absolute path), else a key in the model's bucket; a missing or malformed file raises
    :class:`ConfigurationError` (the init fails, as for a bad variable)."""
    where = settings.serving.prompt_prefixes
    assert where is not None
    try:
        path = declared_file(where)
    except ConfigurationError as exc:
        raise ConfigurationError(f"SNAPLLM_PROMPT_PREFIXES: {exc}") from None
    if path is not None:
        try:
            with path.open("rb") as file:
                data = file.read(MAX_PREFIXES_BYTES + 1)
        except OSError as exc:
            raise ConfigurationError(f"SNAPLLM_PROMPT_PREFIXES: {path} could not be read: {exc}") from exc
        if len(data) > MAX_PREFIXES_BYTES:
            raise ConfigurationError(
                f"SNAPLLM_PROMPT_PREFIXES: {path} is larger than {MAX_PREFIXES_BYTES} bytes"
            )
        source = str(path)
    else:
        data = loader.read_object(settings.model.bucket, where, max_bytes=MAX_PREFIXES_BYTES)
        source = f"s3://{settings.model.bucket}/{where}"
    return read_prefixes(data, source=source)


class InferenceRuntime:
    """One loaded model and the hooks and handler around it."""

    def __init__(
        self, engine: Engine | EmbeddingEngine, settings: InferenceSettings, *, download: DownloadStats
    ) -> None:
        self.engine = engine
        self.settings = settings
        limits = settings.serving
        self.model_name = engine.model_name
        # A text model serves the completions; an embedding model, the embeddings; a reranker (an embedding
        # model with rank pooling), the reranking. All serve their tokens.
        self._serving: OpenAIServing | None = None
        self.embeddings: EmbeddingServing | None = None
        self.reranking: RerankServing | None = None
        if isinstance(engine, EmbeddingEngine):
            embedding_limits = EmbeddingLimits(
                max_inputs=limits.max_embedding_inputs,
                max_tokens=limits.max_embedding_tokens,
                max_input_chars=limits.max_prompt_chars,
                truncatable=limits.embedding_truncatable,
            )
            if engine.is_reranker:
                self.reranking = RerankServing(engine, limits=embedding_limits)
            else:
                self.embeddings = EmbeddingServing(engine, limits=embedding_limits)
        else:
            self._serving = OpenAIServing(
                engine, max_tokens=limits.max_tokens, max_prompt_chars=limits.max_prompt_chars
            )
        self.routes = ModelRoutes(
            model_name=engine.model_name,
            vocabulary=engine,
            serving=self._serving,
            embeddings=self.embeddings,
            reranking=self.reranking,
            max_chars=limits.max_prompt_chars,
        )
        self.download = download
        self.environment_id = uuid.uuid4().hex
        self.restores = 0
        self._first_invoke_pending = True
        self.last_prefault: PrefaultStats | None = None
        #: The deploy's declared prompt prefixes (``SNAPLLM_PROMPT_PREFIXES``), evaluated by the warm-up.
        self.prefix_entries: list[dict[str, Any]] = []

    @property
    def serving(self) -> OpenAIServing:
        """The completions of a text model; an embedding model or a reranker refuses them with a 400."""
        if self._serving is None:
            kind, route = ("a reranker", RERANK) if self.reranking else ("an embedding model", EMBEDDINGS)
            raise UnsupportedParameterError(
                f"{self.model_name} is {kind}: it serves {route}, /tokenize and /detokenize, not completions",
                param="model",
            )
        return self._serving

    @classmethod
    def initialize(
        cls, settings: InferenceSettings | None = None, loader: S3ModelLoader | None = None
    ) -> InferenceRuntime:
        """Stream the configured model from S3 into memory and load it. Runs once, at module init."""
        with phases.measure("init"):
            settings = settings or InferenceSettings.from_env()
            loader = loader or S3ModelLoader.from_env(settings.loader)
            # Before the download: a missing or malformed file fails the init at once.
            prefixes = (
                read_declared_prefixes(settings, loader)
                if settings.serving.prompt_prefixes and not settings.engine.embedding_pooling
                else []
            )
            with phases.measure("s3_to_memfd"):
                model = loader.load(settings.model)
            with model, phases.measure("model_load"):
                # llama.cpp reads the memfd into its repacked buffers (or maps it: the mapping outlives the
                # fd); closing it here frees what it no longer needs, so the weights stay resident once.
                load = EmbeddingEngine.load if settings.engine.embedding_pooling else Engine.load
                engine = load(
                    model.path,
                    settings.engine,
                    model_name=settings.model.name,
                    source=settings.model.uri,
                    model_digest=model.sha256,
                )
        runtime = cls(engine, settings, download=model.stats)
        runtime.prefix_entries = prefixes
        logger.info(
            "model ready",
            extra={
                "model": settings.model.name,
                "source": settings.model.uri,
                "download": model.stats.as_dict(),
                "threads": engine.threads,
                "n_ctx": engine.n_ctx,
                "phases": phases.as_dict(),
                "rss_bytes": rss_bytes(),
            },
        )
        return runtime

    # --- SnapStart ----------------------------------------------------------------------------------------

    def before_snapshot(self, *, streams: bool = False) -> None:
        """Prime the model so the snapshot holds warm compute buffers, then tidy the heap. ``streams``: the
        function streams answers too (the streaming function), so the streamed paths are primed as well."""
        with phases.measure("warm_up"):
            # No thread but this one in the snapshot: the local stack restores it by forking, which keeps
            # only the forking thread. The warm-up's decodes run on threads of their own, after which the
            # pool's are joined; the restore's hook starts a pool again.
            self.engine.stop_threads()
            if self._serving is None:
                # Through the handler, so decoding, validation and a batch of several inputs have run once.
                event = (
                    routed_event(RERANK, dict(RERANK_WARMUP))
                    if self.reranking
                    else routed_event(EMBEDDINGS, {"input": list(EMBEDDING_WARMUP)})
                )
                answer = self.handle(event, None)
                if "statusCode" in answer:
                    raise ServerError(f"the {event['route']} warm-up failed: {answer}")
            else:
                self._warm_up_completions(streams=streams)
        self._first_invoke_pending = True
        stop_grammar_thread()
        stop_schema_thread()
        gc.collect()
        logger.info("snapshot ready", extra={"rss_bytes": rss_bytes(), "peak_rss_bytes": peak_rss_bytes()})

    def _warm_up_completions(self, *, streams: bool) -> None:
        bodies = self.serving.warm_up_bodies(max(1, self.settings.serving.warmup_tokens))
        for refusal in self.serving.warm_up_refusals:
            logger.warning("warm-up path refused by the model's chat template", extra={"refusal": refusal})
        # Through the handler first, so decoding, validation, rendering and logging have run once too.
        for body in bodies:
            answer = self.handle(dict(body), None)
            if "statusCode" in answer:  # a warm-up the function refuses is a bug: fail the publish
                raise ServerError(f"warm-up request {body} failed: {answer}")
        # The handler generated each whole: what is left is the streamed path, where the function serves it.
        # The prefixes snapllm ships (the template's default) are the agent's: a model that cannot serve
        # them (no system role, no chat template) still deploys, without them.
        shipped = (self.settings.serving.prompt_prefixes or "").startswith(BUNDLED)
        self.serving.warm_up(
            bodies, prefixes=self.prefix_entries, prefixes_refused_ok=shipped, whole=False, streamed=streams
        )
        for refusal in self.serving.prefix_refusals:
            logger.warning("declared prompt prefix left out", extra={"refusal": refusal})
        if self.prefix_entries:
            cache = self.serving.engine.prefix_cache
            logger.info(
                "prompt prefixes kept",
                extra={"prefixes": len(cache.pinned), "bytes": cache.pinned_bytes},
            )

    def after_restore(self) -> None:
        """Make this environment distinct from every other one restored from the same snapshot, then fault
        in the memory the first request would otherwise wait for (``SNAPLLM_PREFAULT``)."""
        random.seed()
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()
        self.environment_id = uuid.uuid4().hex
        self.restores += 1
        self._first_invoke_pending = True
        self.engine.start_threads()
        start_grammar_thread()
        start_schema_thread()
        engine = self.settings.engine
        with phases.measure("prefault"):
            self.last_prefault = prefault(engine.prefault, threads=engine.prefault_threads)

    def register_snapstart_hooks(self) -> None:
        """Register the hooks with the Lambda runtime (``snapshot-restore-py``)."""
        register_before_snapshot(self.before_snapshot)
        register_after_restore(self.after_restore)

    # --- Invoke -------------------------------------------------------------------------------------------

    def handle(self, event: Any, context: Any) -> dict[str, Any]:
        """Answer one direct invoke: an OpenAI chat or text completion request, a Responses request, or a
        routed event of another route (:mod:`snapllm.protocol.model_routes.model_routes`)."""
        started = time.perf_counter()
        cold = self._first_invoke_pending
        self._first_invoke_pending = False
        request_id = getattr(context, "aws_request_id", None)
        try:
            # Lambda's runtime has decoded the payload already: an event that is not an object (a JSON
            # array, string or number) is a bad body, never JSON text to decode a second time.
            route, body = split_event(require_object(event))
            deadline = invoke_deadline(context, margin_ms=self.settings.serving.deadline_margin_ms)
            if route is not None:
                answer = self.routes.answer(route, body, deadline=deadline)
                logger.info(
                    "route answered",
                    extra={
                        "request_id": request_id,
                        "route": route,
                        "cold_start": cold,
                        "handler_ms": round((time.perf_counter() - started) * 1000, 2),
                    },
                )
                return answer
            request = self.serving.parse(body)
            if request.stream:
                raise UnsupportedParameterError(
                    "stream=true needs the streaming endpoint (the function URL); a direct invoke returns "
                    "the whole completion",
                    param="stream",
                )
            if request.ignored_fields:
                logger.warning(
                    "unknown request fields ignored",
                    extra={"request_id": request_id, "fields": list(request.ignored_fields)},
                )
            response, generation = self.serving.complete(request, deadline=deadline)
            if request.ignored_fields:
                # A direct invoke has no headers for them: the answer names them.
                response["ignored_fields"] = list(request.ignored_fields)
        except RequestError as exc:
            return self._reject(exc, request_id)
        except Exception:
            logger.exception("generation failed", extra={"request_id": request_id})
            return ServerError(
                f"generation failed (request id {request_id}); see the function's logs"
            ).to_response()

        logger.info(
            "completion",
            extra={
                "request_id": request_id,
                "cold_start": cold,
                "environment_id": self.environment_id,
                "usage": response["usage"],
                "timings": response["timings"],
                "finish_reason": generation.finish_reason,
                "handler_ms": round((time.perf_counter() - started) * 1000, 2),
            },
        )
        return response

    @staticmethod
    def _reject(error: RequestError, request_id: str | None) -> dict[str, Any]:
        logger.warning(
            "request rejected",
            extra={"request_id": request_id, "error_type": type(error).__name__, "param": error.param},
        )
        return error.to_response()

"""What a user's model is, read before it is deployed: its family, chat template, thinking and tool-call
format, what its template refuses (tried through snapllm's own renderer on the requests the warm-up and
common clients send), and the memory it needs (docs/models.md, "Before you deploy").

    profile = ModelProfile.read(Path("model.gguf"), n_ctx=2048)
    profile.family, profile.refusals, profile.memory_mb
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_cpp import Llama

from snapllm.errors import RequestError
from snapllm.protocol.completions.chat import ChatRenderer
from snapllm.protocol.families.families import ModelFamily, detect_family
from snapllm.protocol.prefixes import common_prefix, sentinel_bodies
from snapllm.protocol.requests import parse_request
from snapllm_dev.footprint import MemoryFootprint, MiB, kv_cache_bytes

_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
#: The conversations a deployed model meets first: what its template must render.
PROBES: dict[str, dict[str, Any]] = {
    "chat": {"messages": [{"role": "user", "content": "Hello."}]},
    "system message": {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello."}]
    },
    "multi-turn": {
        "messages": [
            {"role": "user", "content": "Hello."},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Bye."},
        ]
    },
    "tools": {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [_WEATHER]},
    "tool results": {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        ],
        "tools": [_WEATHER],
    },
    "thinking off": {"messages": [{"role": "user", "content": "Hello."}], "reasoning_effort": "none"},
}


@dataclass(frozen=True)
class ModelProfile:
    """A GGUF file's family, chat checks and memory, as ``snapllm preflight --model`` reports them."""

    path: Path
    size_bytes: int
    architecture: str
    family: Mapping[str, str]
    template: str  # "the file's", "the family's (the file has none)" or "none"
    refusals: Mapping[str, str] = field(default_factory=dict)
    kv_cache_bytes: int = 0
    n_ctx: int = 2048
    #: The tokens of each declared prompt prefix, as the model's template renders it.
    prefix_tokens: tuple[int, ...] = ()
    #: Their saved KV states' bytes (an f16 KV cache's, position for position).
    prefix_states_bytes: int = 0

    @classmethod
    def read(cls, path: Path, *, n_ctx: int, prefixes: list[dict[str, Any]] | None = None) -> ModelProfile:
        """Read the file's metadata and vocabulary (no weights are loaded), render the probes, and the
        declared ``prefixes`` (:mod:`snapllm.protocol.prefixes`) to count their states."""
        llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
        metadata = dict(llama.metadata)
        vocab = llama._model
        bos, eos = llama.token_bos(), llama.token_eos()
        renderer = ChatRenderer.for_model(
            metadata,
            vocab.token_get_text(bos) if bos != -1 else "",
            vocab.token_get_text(eos) if eos != -1 else "",
        )
        architecture = str(metadata.get("general.architecture", ""))
        family = detect_family(renderer.source if renderer else "", architecture=architecture)
        own = bool(metadata.get("tokenizer.chat_template"))
        template = "the file's" if own else ("the family's (the file has none)" if renderer else "none")
        refusals: dict[str, str] = {}
        for name, body in PROBES.items():
            if renderer is None:
                break
            try:
                request = parse_request(body)
                renderer.render(request, family.template_kwargs(request.reasoning_effort))
            except RequestError as exc:
                refusals[name] = exc.message
        lengths = tuple(
            _prefix_length(llama, renderer, family, entry)
            for entry in (prefixes or [])
            if renderer is not None
        )
        return cls(
            path=path,
            prefix_tokens=lengths,
            prefix_states_bytes=sum(kv_cache_bytes(metadata, length) for length in lengths),
            size_bytes=path.stat().st_size,
            architecture=architecture,
            family=family.describe(),
            template=template,
            refusals=refusals,
            kv_cache_bytes=kv_cache_bytes(metadata, n_ctx),
            n_ctx=n_ctx,
        )

    @property
    def footprint(self) -> MemoryFootprint:
        """The memory the model needs, serving and while it loads."""
        return MemoryFootprint(
            weights_bytes=self.size_bytes,
            kv_cache_bytes=self.kv_cache_bytes,
            prefix_states_bytes=self.prefix_states_bytes,
        )

    @property
    def memory_mb(self) -> int:
        """The memory the function needs: what the loaded model holds, or the load's peak if higher."""
        return -(-self.footprint.needed_bytes // MiB)


def _prefix_length(llama: Llama, renderer: ChatRenderer, family: ModelFamily, entry: dict[str, Any]) -> int:
    """How many tokens a declared prefix renders to: what its renders with two sentinel user turns share
    (a prefix the template refuses is counted as none: the function's init names it)."""
    try:
        first, second = (
            llama.tokenize(
                renderer.render(request, family.template_kwargs(request.reasoning_effort)).prompt.encode(),
                add_bos=False,
                special=True,
            )
            for request in (parse_request(body) for body in sentinel_bodies(entry, "model"))
        )
    except RequestError:
        return 0
    return len(common_prefix(first, second))

"""Greedy-generates a few tokens with llama_cpp and prints one JSON line (used by scripts/test-arm64.sh).

Runs unchanged under qemu-aarch64 (the built arm64 layer on PYTHONPATH) and natively (the reference), so
the two outputs can be compared token for token. ``--no-repack`` turns off llama.cpp's repacking of the
weights for the CPU's kernels (``use_extra_bufts``, which ``Llama()`` has no argument for), so the repacked
and the plain kernels can be compared on one machine; ``top`` is the prompt's most likely next tokens with
their logits, to state how far the two kernels' numbers are apart. ``--constrained`` generates through the
engine's own decoder (the snapllm layer on PYTHONPATH too) under a JSON schema's llguidance grammar, so
llguidance's aarch64 wheel builds its token masks over the model's vocabulary.

Example:
    python scripts/arm64_smoke.py --model SmolLM2-135M-Instruct.Q4_1.gguf --tokens 8
"""

from __future__ import annotations

import argparse
import json
import platform
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--no-repack", action="store_true", help="keep the weights in the file's layout")
    parser.add_argument("--constrained", action="store_true", help="under a JSON schema, by the engine")
    args = parser.parse_args()
    if args.constrained:
        return constrained(args)

    started = time.perf_counter()
    import llama_cpp
    import llama_cpp.llama_cpp as low_level
    import numpy

    imported = time.perf_counter()
    defaults = low_level.llama_model_default_params

    def model_params() -> low_level.llama_model_params:
        params = defaults()
        params.use_extra_bufts = not args.no_repack
        return params

    low_level.llama_model_default_params = model_params
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=128, n_batch=32, n_threads=2, verbose=False)
    low_level.llama_model_default_params = defaults
    loaded = time.perf_counter()
    prompt = llm.tokenize(args.prompt.encode())
    llm.eval(prompt)
    # llama.cpp's own row: llama-cpp-python fills ``scores`` only when every position keeps its logits.
    row = low_level.llama_get_logits_ith(llm.ctx, -1)
    logits = numpy.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()  # generating overwrites the row
    top = [int(token) for token in (-logits).argsort(kind="stable")[:5]]
    tokens: list[int] = []
    for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        if token == llm.token_eos() or len(tokens) == args.tokens:
            break
        tokens.append(token)
    done = time.perf_counter()
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "llama_cpp": llama_cpp.__file__,
                "repack": not args.no_repack,
                "tokens": tokens,
                "top": [[token, round(float(logits[token]), 4)] for token in top],
                "text": llm.detokenize(tokens).decode(errors="replace"),
                "import_s": round(imported - started, 2),
                "load_s": round(loaded - imported, 2),
                "generate_s": round(done - loaded, 2),
            }
        )
    )
    return 0


#: The schema of the constrained run: the answer can only be this object, whatever the model prefers.
SCHEMA = {
    "type": "object",
    "properties": {"capital": {"type": "string", "maxLength": 12}},
    "required": ["capital"],
    "additionalProperties": False,
}


def constrained(args: argparse.Namespace) -> int:
    """Greedy tokens under SCHEMA from snapllm's decoder (llguidance's matcher), as one JSON line."""
    started = time.perf_counter()
    import llama_cpp
    import llguidance

    from snapllm.engine.decode import Decoder
    from snapllm.engine.types import Sampling

    imported = time.perf_counter()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=256, n_batch=32, n_threads=2, verbose=False)
    decoder = Decoder(llm)  # builds llguidance's tokenizer over the vocabulary
    loaded = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    prompt = llm.tokenize(b"The capital of France, as JSON:")
    tokens: list[int] = []
    for sampled in decoder.tokens(prompt, Sampling(0.0, 1.0, seed=1), grammar=grammar, limit=args.tokens):
        if sampled.end_of_generation:
            break
        tokens.append(sampled.token)
    done = time.perf_counter()
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "llama_cpp": llama_cpp.__file__,
                "llguidance": llguidance.__file__,
                "tokens": tokens,
                "masks": decoder.grammar_fallbacks,
                "text": llm.detokenize(tokens).decode(errors="replace"),
                "import_s": round(imported - started, 2),
                "load_s": round(loaded - imported, 2),
                "generate_s": round(done - loaded, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Greedy-generates a few tokens with llama_cpp and prints one JSON line (used by scripts/test-arm64.sh).

Runs unchanged under qemu-aarch64 (the built arm64 layer on PYTHONPATH) and natively (the reference), so
the two outputs can be compared token for token.

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
    args = parser.parse_args()

    started = time.perf_counter()
    import llama_cpp

    imported = time.perf_counter()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=128, n_batch=32, n_threads=2, verbose=False)
    loaded = time.perf_counter()
    prompt = llm.tokenize(args.prompt.encode())
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
                "tokens": tokens,
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

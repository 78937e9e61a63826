"""How the tests generate: on one thread, with a one-token warm-up, and with a prompt that keeps the model
busy.

Generation in tests runs with one thread: ggml's worker threads spin-wait on each other, and on a machine
whose cores are busy with anything else that collapses throughput by orders of magnitude. One thread keeps
the suite's duration independent of what else runs beside it.
"""

from __future__ import annotations

from snapllm.engine.model import Engine
from snapllm.protocol.serving import OpenAIServing

TEST_THREADS = "1"
#: The tokens each request of a function's before-snapshot warm-up generates (``SNAPLLM_WARMUP_TOKENS``, 4
#: by default). At one, the warm-up sends the same requests, so the same templates, grammars and samplers are
#: built and run, and samples fewer tokens: about 0.3 CPU-seconds less per pass over the requests, for each
#: of the some 65 functions the suite initializes.
TEST_WARMUP_TOKENS = "1"
#: No declared prompt prefixes (the template declares the agent's prompts): evaluating them before the
#: snapshot is about a CPU-second of each function's warm-up. For the functions and commands of tests that
#: send none of them; the prefix tests, the agent's, the replays and each worker's shared server keep the
#: template's.
NO_PROMPT_PREFIXES = {"SNAPLLM_PROMPT_PREFIXES": ""}

# Greedy decoding of this prompt counts on for well over 512 tokens without an end-of-sequence token, so a
# test that needs generation to still be running when a deadline passes does not depend on sampling luck.
LONG_GENERATION = {"prompt": "Count from one to a thousand: 1, 2, 3, 4, 5,", "temperature": 0.0}


def serving_over(engine: Engine, max_tokens: int = 256) -> OpenAIServing:
    """The OpenAI protocol over ``engine``, allowing answers of up to ``max_tokens``."""
    return OpenAIServing(engine, max_tokens=max_tokens, max_prompt_chars=32_000)

"""What the agent's integration modules share: their worker, how long an answer they need, and a count of
the handler's invocations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The agent's modules run on one worker (``pytest.mark.xdist_group``), so they share its restored model
#: (the ``agent`` fixture, one per process).
AGENT_GROUP = "agent"

#: An agent run's answer where a test needs only that the model answered (the run's steps, checkpoints or
#: approvals are its point): the answer's seed does not depend on its max_tokens, so it is the start of the
#: full answer, and each token less is decode time saved.
SHORT_ANSWER_TOKENS = 8


class CountingHandler:
    """``LocalAgent.run(wrap_handler=...)``: passes each invocation of the durable handler through and counts
    it (an approval wait ends one; the next replays the operations before it)."""

    def __init__(self) -> None:
        self.invocations = 0

    def __call__(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def counted(event: Any, context: Any) -> Any:
            self.invocations += 1
            return handler(event, context)

        return counted

"""What the agent's integration modules share: their worker, and how long an answer they need."""

from __future__ import annotations

#: The agent's modules run on one worker (``pytest.mark.xdist_group``), so they share its restored model
#: (the ``agent`` fixture, one per process).
AGENT_GROUP = "agent"

#: An agent run's answer where a test needs only that the model answered (the run's steps, checkpoints or
#: approvals are its point): the answer's seed does not depend on its max_tokens, so it is the start of the
#: full answer, and each token less is decode time saved.
SHORT_ANSWER_TOKENS = 8

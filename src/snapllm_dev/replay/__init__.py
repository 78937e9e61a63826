"""JSON event replays: each event in ``events/`` through its function, compared with the answer recorded
beside it (``chat.json`` -> ``chat.expected.json``). See :mod:`snapllm_dev.replay.cli`."""

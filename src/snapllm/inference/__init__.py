"""The inference function: its settings, its Lambda lifecycle (init, SnapStart hooks, invoke) and the
client other functions call it through.

- :mod:`~snapllm.inference.settings`: the ``SNAPLLM_`` variables, read once at init.
- :mod:`~snapllm.inference.runtime`: load the model, warm it up before the snapshot, serve invokes.
- :mod:`~snapllm.inference.client`: call it through Lambda ``Invoke`` (or an always-on endpoint).
"""

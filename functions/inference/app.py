"""InferenceFunction: generates with a GGUF model that SnapStart holds loaded and warm.

Module init streams the model from S3 into memory and loads it; the before-snapshot hook warms it up,
so a restored environment only generates tokens. The logic lives in ``snapllm.inference.runtime``.
"""

from snapllm.inference.runtime import InferenceRuntime

runtime = InferenceRuntime.initialize()
runtime.register_snapstart_hooks()


def handler(event: dict, context: object) -> dict:
    return runtime.handle(event, context)

"""StreamFunction: the OpenAI routes with token streaming, served by Lambda Web Adapter.

LWA (the layer, via AWS_LAMBDA_EXEC_WRAPPER) starts ``run.sh``, which runs this ASGI app with uvicorn.
Module init loads the model as InferenceFunction does; LWA's SnapStart hooks (HTTP calls into this app)
do the warm-up before the snapshot and the re-seed after restore. The logic lives in ``snapllm.streaming``.
"""

from snapllm.inference.runtime import InferenceRuntime
from snapllm.streaming.app import create_app

runtime = InferenceRuntime.initialize()
app = create_app(runtime)

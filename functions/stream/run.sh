#!/bin/bash
# Lambda Web Adapter's handler: start the ASGI app on the port LWA forwards to (loopback only).
# LWA starts this script itself, not through the Python runtime's bootstrap, which is what puts the layers
# on Python's path: without this line the app cannot import snapllm or llama_cpp from /opt/python.
# (--app-dir puts the function's own folder first, as the runtime does.)
export PYTHONPATH="/opt/python/lib/python3.13/site-packages:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m uvicorn --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log --app-dir "$LAMBDA_TASK_ROOT" app:app

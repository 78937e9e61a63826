#!/bin/bash
# Lambda Web Adapter's handler: start the ASGI app on the port LWA forwards to (loopback only).
exec python3 -m uvicorn --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log --app-dir "$LAMBDA_TASK_ROOT" app:app

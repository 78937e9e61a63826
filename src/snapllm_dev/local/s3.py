"""A local S3 endpoint: moto's server mode in its own process, spoken to over real HTTP.

    with LocalS3.start() as s3:
        s3.put_model(Path("model.gguf"), bucket="models", key="m.gguf")
        env = s3.client_environment()   # AWS_ENDPOINT_URL_S3 and dummy credentials for boto3

The server runs in a separate process, as S3 is remote in production: an in-process server would share
the client's interpreter lock and distort every transfer timing.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import boto3
from boto3.s3.transfer import TransferConfig

from snapllm.errors import SnapllmError
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering

#: Credentials for the local stand-ins (moto, SAM's emulators), which accept any: real ones never leave.
LOCAL_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "snapllm-local",
    "AWS_SECRET_ACCESS_KEY": "snapllm-local",
    "AWS_SESSION_TOKEN": "snapllm-local",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


#: The largest object S3 takes in one PUT. A model up to that size goes to the local endpoint in one request:
#: moto joins a multipart upload's parts by copying them, and one PUT of the 98 MB packaged model took half
#: the CPU of the multipart upload (0.6 CPU-seconds against 1.2, moto's and the client's together).
SINGLE_PUT_BYTES = 5 * 1024**3


class LocalS3Error(SnapllmError):
    """The local S3 endpoint did not start or stopped answering."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def sha256_file(path: Path, *, chunk: int = 8 * 1024 * 1024) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class LocalS3:
    """A moto S3 server on 127.0.0.1 (or ``host``: the address containers reach this machine on). Use
    :meth:`start` (a context manager) and :meth:`stop`."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, host: str = "127.0.0.1", *, log: IO[bytes]
    ) -> None:
        self._process = process
        self._log = log
        self.port = port
        self.endpoint_url = f"http://{host}:{port}"

    @classmethod
    def start(cls, port: int | None = None, *, host: str = "127.0.0.1", timeout_s: float = 30.0) -> LocalS3:
        port = port or free_port(host)
        # A file, not a pipe: moto logs a line per request, and a pipe nobody reads fills up after about
        # 64 KB, blocking the server mid-request. The log's tail explains a server that exits at start.
        log = tempfile.TemporaryFile(prefix="snapllm-moto-")  # noqa: SIM115 (closed by stop())
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **LOCAL_CREDENTIALS},
        )
        server = cls(process, port, host, log=log)
        server._wait_ready(timeout_s)
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        url = f"{self.endpoint_url}/moto-api/"
        if wait_until_answering(self._process, url, timeout_s=timeout_s, interval_s=0.1):
            return
        if self._process.poll() is not None:
            self._log.seek(0)
            err = self._log.read().decode(errors="replace")
            raise LocalS3Error(f"moto server exited with {self._process.returncode}: {err[-2000:]}")
        self.stop()
        raise LocalS3Error(f"moto server did not answer on {self.endpoint_url} within {timeout_s} s")

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        stop_process(self._process)
        self._log.close()

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client_environment(self) -> dict[str, str]:
        """Environment variables that point boto3 (in any process) at this endpoint."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint_url, **LOCAL_CREDENTIALS}

    def client(self, *, endpoint_url: str | None = None, config: Any = None) -> Any:
        """A boto3 S3 client for this endpoint (or for a proxy in front of it, ``endpoint_url``)."""
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            config=config,
            region_name=LOCAL_CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=LOCAL_CREDENTIALS["AWS_SESSION_TOKEN"],
        )

    def ensure_bucket(self, bucket: str) -> None:
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except client.exceptions.ClientError:
            client.create_bucket(Bucket=bucket)

    def put_model(self, path: Path, *, bucket: str, key: str) -> str:
        """Upload a model file as deployments do: with its SHA-256 as ``sha256`` object metadata."""
        self.ensure_bucket(bucket)
        digest = sha256_file(path)
        self.client().upload_file(
            str(path),
            bucket,
            key,
            ExtraArgs={"Metadata": {"sha256": digest}},
            Config=TransferConfig(multipart_threshold=SINGLE_PUT_BYTES),
        )
        return digest

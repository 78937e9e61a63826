"""A web-adapter function (StreamFunction) in a Lambda container, as far as it runs without the adapter.

    with WebAdapterContainer.start(build, "StreamFunction", image=BASE_IMAGE, variables=env) as container:
        report = container.drive()

docs/testing.md ("StreamFunction runs without its adapter") says what runs in the container and what the
driver (:mod:`snapllm_dev.samlocal.adapter_driver`) checks.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapllm_dev.local.processes import Closing
from snapllm_dev.preflight.template import Build
from snapllm_dev.samlocal.docker import DockerError, docker, exec_python

DRIVER = Path(__file__).with_name("adapter_driver.py")
#: The label of the containers this module starts, with the function's logical ID.
LABEL = "snapllm.web-adapter-function"


@dataclass
class WebAdapterContainer(Closing):
    function: str
    container: str
    started: float
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @classmethod
    def start(
        cls, build: Build, function: str, *, image: str, variables: dict[str, str]
    ) -> WebAdapterContainer:
        """Create the container from ``image``, copy in the function's layers and code, start its handler."""
        spec = next((fn for fn in build.functions if fn.name == function), None)
        if spec is None or spec.path is None:
            raise DockerError(f"{function} is not in the build {build.root}")
        environment = {name: value for name, value in variables.items() if name != "AWS_LAMBDA_EXEC_WRAPPER"}
        environment.update(
            AWS_LAMBDA_FUNCTION_NAME=function, AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(spec.memory)
        )
        flags = [flag for name, value in sorted(environment.items()) for flag in ("--env", f"{name}={value}")]
        remove_web_adapter_containers()
        container = docker(
            "create", "--label", f"{LABEL}={function}", "--workdir", "/var/task", *flags,
            "--entrypoint", f"/var/task/{spec.handler}", image,
        ).strip()  # fmt: skip
        with contextlib.ExitStack() as resources:
            resources.callback(docker, "rm", "--force", container)
            # The layers in their template order, as Lambda extracts them: a later one overwrites an earlier.
            for layer in spec.layers:
                if layer.path is not None:
                    docker("cp", f"{layer.path}/.", f"{container}:/opt/")
            docker("cp", f"{spec.path}/.", f"{container}:/var/task/")
            started = time.monotonic()
            docker("start", container)
            return cls(function, container, started, resources.pop_all())

    def drive(self) -> dict[str, Any]:
        """Run the adapter's part from inside the container; the driver's report, with the app's log tail."""
        report = exec_python(self.container, DRIVER, timeout_s=600)
        report["log_tail"] = docker("logs", "--tail", "20", self.container, stderr=True)[-3000:]
        return report

    def close(self) -> None:
        self.resources.close()


def remove_web_adapter_containers() -> None:
    found = docker("ps", "--all", "--quiet", "--filter", f"label={LABEL}").split()
    if found:
        docker("rm", "--force", *found)

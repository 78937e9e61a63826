"""One table of hostile command lines against every ``snapllm`` subcommand.

Missing and malformed arguments, numbers out of range (negative, zero, 1e300, nan, inf), files that are
missing, empty, not JSON, not YAML, not TOML or not GGUF, and malformed ``SNAPLLM_*``, ``POWERTOOLS_*``,
``PORT`` and AWS variables. Each must end with exit 2 and its last line naming the argument or variable,
print no traceback, and leave no process or thread running.

Every case runs in-process through ``main(argv)``; a few, one per kind of work a command reaches before it
fails (the parser, a local function's init, the local S3 endpoint, a server's start, Docker), also run as
a user runs them, in a process and a session of their own with a marker in the environment, so that the
exit code is the process's and the process table is searched for what they leave behind.

No case loads a model: the ones that reach a function fail at its configuration, before the load.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import INVOKE_COMPLETION, run_main
from tests.support.generation import TEST_THREADS
from tests.support.paths import REPO

MARKER = "SNAPLLM_TEST_CLI_CASE_MARKER"  # not read by snapllm: a name no function declares or is given
# A case that misbehaves (starts serving, say) is stopped here; a correct one ends in seconds.
CASE_TIMEOUT_S = 240


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    names: str  # what the last line of stderr must name (the argument, variable or file)
    env: Mapping[str, str] = field(default_factory=dict)
    code: int = 2


def case(id: str, *argv: str, names: str, env: Mapping[str, str] | None = None, code: int = 2) -> Case:
    return Case(id, argv, names, env or {}, code)


FAKE_KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
COST = ("cost", "--no-plot", "--requests-per-day", "100", "--tokens-per-s", "40")
SPEED = ("--tokens-per-s", "40", "--ttft-ms", "300")
INVOKE = INVOKE_COMPLETION
SERVE = ("local", "serve", "--no-stream", "--model", "smollm2-135m")

CASES = [
    # --- the command itself, and PORT, which used to be read while the parser was built -----------------
    case("no-command", names="command"),
    case("unknown-command", "bogus", names="bogus"),
    case("help-with-bad-PORT", "--help", names="", env={"PORT": "abc"}, code=0),
    case("cost-with-bad-PORT", *COST, "--ttft-ms", "300", "--json", names="", env={"PORT": "abc"}, code=0),
    case("serve-bad-PORT", *SERVE, names="PORT", env={"PORT": "abc"}),
    case("serve-PORT-out-of-range", *SERVE, names="PORT", env={"PORT": "99999"}),
    case("serve-PORT-negative", *SERVE, names="PORT", env={"PORT": "-1"}),
    # --- local serve --------------------------------------------------------------------------------------
    case("serve-port-out-of-range", *SERVE, "--port", "99999", names="--port"),
    case("serve-port-zero", *SERVE, "--port", "0", names="--port"),
    case("serve-port-not-a-number", *SERVE, "--port", "abc", names="--port"),
    case("serve-port-in-use", *SERVE, "--port", "{busy_port}", names="{busy_port}"),
    case("serve-route-no-equals", *SERVE, "--route", "gpt", names="--route"),
    case("serve-api-key-with-a-space", *SERVE, "--api-key", "sk a", names="--api-key"),
    case("serve-api-key-empty", *SERVE, "--api-key", "", names="--api-key"),
    case("serve-api-keys-file-missing", *SERVE, "--api-keys-file", "{missing}", names="--api-keys-file"),
    case("serve-api-keys-file-bad-line", *SERVE, "--api-keys-file", "{not_json}", names="--api-keys-file"),
    # Keys asked for and none found: the start stops (it used to serve with no check at all).
    case("serve-api-keys-file-empty", *SERVE, "--api-keys-file", "{empty}", names="{empty}"),
    case("serve-api-keys-file-only-comments", *SERVE, "--api-keys-file", "{comments}", names="{comments}"),
    case(
        "serve-api-keys-file-blank-lines", *SERVE, "--api-keys-file", "{blank_lines}", names="{blank_lines}"
    ),
    case("serve-SNAPLLM_API_KEY-blank", *SERVE, names="SNAPLLM_API_KEY", env={"SNAPLLM_API_KEY": " "}),
    case("serve-cors-origin-a-path", *SERVE, "--cors-origin", "https://a.example/x", names="--cors-origin"),
    case("serve-start-timeout-zero", *SERVE, "--start-timeout", "0", names="--start-timeout"),
    case("serve-start-timeout-nan", *SERVE, "--start-timeout", "nan", names="--start-timeout"),
    case(
        "serve-SNAPLLM_LOCAL_START_TIMEOUT_S-not-a-number",
        *SERVE,
        names="SNAPLLM_LOCAL_START_TIMEOUT_S",
        env={"SNAPLLM_LOCAL_START_TIMEOUT_S": "soon"},
    ),
    case("serve-route-not-a-url", *SERVE, "--route", "gpt=localhost:8000", names="--route"),
    case("serve-route-no-name", *SERVE, "--route", "=http://127.0.0.1:1/v1", names="--route"),
    case("serve-fallback-empty", *SERVE, "--fallback", "a=", names="--fallback"),
    case("serve-fallback-empty-name", *SERVE, "--fallback", "a=b,,c", names="--fallback"),
    case("serve-fallback-unknown-route", *SERVE, "--fallback", "a=b", names="SNAPLLM_FALLBACKS"),
    case("serve-mcp-no-url", *SERVE, "--mcp", "ops", names="--mcp"),
    case("serve-mcp-bad-scheme", *SERVE, "--mcp", "ops=ftp://127.0.0.1/x", names="--mcp"),
    case("serve-template-missing", *SERVE, "-t", "{missing}", names="--template"),
    case("serve-template-not-yaml", *SERVE, "-t", "{not_yaml}", names="not-yaml.yaml"),
    case("serve-model-not-gguf", *SERVE, "--model", "/etc/hostname", names="--model"),
    case("serve-model-empty", *SERVE, "--model", "{empty}", names="--model"),
    case(
        "serve-bad-variable",
        *SERVE,
        "--port",
        "1",
        names="SNAPLLM_MAX_TOKENS",
        env={"SNAPLLM_MAX_TOKENS": "x"},
    ),
    case("serve-bad-log-level", *SERVE, names="POWERTOOLS_LOG_LEVEL", env={"POWERTOOLS_LOG_LEVEL": "loud"}),
    # --- local invoke ---------------------------------------------------------------------------------------
    case("invoke-no-function", "local", "invoke", names="function"),
    case("invoke-unknown-function", "local", "invoke", "NoSuchFunction", names="NoSuchFunction"),
    case("invoke-event-missing", *INVOKE[:3], "-e", "{missing}", names="missing.json"),
    case("invoke-event-empty", *INVOKE[:3], "-e", "{empty}", names="empty"),
    case("invoke-event-not-json", *INVOKE[:3], "-e", "{not_json}", names="not-json.json"),
    case("invoke-template-not-yaml", *INVOKE, "-t", "{not_yaml}", names="not-yaml.yaml"),
    case("invoke-model-not-gguf", *INVOKE, "--model", "/etc/hostname", names="--model"),
    case("invoke-timeout-nan", *INVOKE, "--timeout", "nan", names="--timeout"),
    case("invoke-timeout-zero", *INVOKE, "--timeout", "0", names="--timeout"),
    case("invoke-timeout-huge", *INVOKE, "--timeout", "1e300", names="--timeout"),
    case("invoke-env-no-equals", *INVOKE, "--env", "SNAPLLM_THREADS", names="--env"),
    case("invoke-bad-fault", *INVOKE, "--s3-fault", "explode@1MB", names="--s3-fault"),
    case("invoke-mcp-no-url", *INVOKE, "--mcp", "ops", names="--mcp"),
    case("invoke-agent-no-event", "local", "invoke", "AgentFunction", "--approve", names="-e"),
    case(
        "invoke-agent-bad-variable",
        *("local", "invoke", "AgentFunction", "-e", "events/agent/review.json", "--approve"),
        names="SNAPLLM_AGENT_MAX_TOOL_CALLS",
        env={"SNAPLLM_AGENT_MAX_TOOL_CALLS": "many"},
    ),
    case("invoke-max-tokens-abc", *INVOKE, names="SNAPLLM_MAX_TOKENS", env={"SNAPLLM_MAX_TOKENS": "abc"}),
    case("invoke-prefault-bogus", *INVOKE, names="SNAPLLM_PREFAULT", env={"SNAPLLM_PREFAULT": "bogus"}),
    case("invoke-log-level-bogus", *INVOKE, names="SNAPLLM_LOG_LEVEL", env={"SNAPLLM_LOG_LEVEL": "bogus"}),
    case("invoke-env-bad-powertools", *INVOKE, "--env", "POWERTOOLS_DEV=maybe", names="POWERTOOLS_DEV"),
    case(
        "invoke-router-bad-log-level",
        *("local", "invoke", "RouterFunction", "-e", "events/router/health.json"),
        names="POWERTOOLS_LOG_LEVEL",
        env={"POWERTOOLS_LOG_LEVEL": "bogus"},
    ),
    case(
        "invoke-router-bad-sample-rate",
        *("local", "invoke", "RouterFunction", "-e", "events/router/health.json"),
        names="POWERTOOLS_LOGGER_SAMPLE_RATE",
        env={"POWERTOOLS_LOGGER_SAMPLE_RATE": "often"},
    ),
    # --- cost ---------------------------------------------------------------------------------------------
    case("cost-no-volume", "cost", *SPEED, names="--requests-per-day"),
    case("cost-volume-1e300", "cost", "--requests-per-day", "1e300", *SPEED, names="--requests-per-day"),
    case("cost-volume-nan", "cost", "--requests-per-day", "nan", *SPEED, names="--requests-per-day"),
    case("cost-volume-inf", "cost", "--requests-per-day", "inf", *SPEED, names="--requests-per-day"),
    case("cost-volume-negative", "cost", "--requests-per-day", "-5", *SPEED, names="--requests-per-day"),
    case("cost-volume-zero", "cost", "--requests-per-day", "0", *SPEED, names="--requests-per-day"),
    case("cost-ttft-nan", *COST, "--ttft-ms", "nan", names="--ttft-ms"),
    case("cost-ttft-negative", *COST, "--ttft-ms", "-1", names="--ttft-ms"),
    case(
        "cost-tokens-per-s-zero",
        "cost",
        "--requests-per-day",
        "9",
        "--tokens-per-s",
        "0",
        names="--tokens-per-s",
    ),
    case("cost-profile-short", "cost", "--profile", "1,2", *SPEED, names="--profile"),
    case("cost-profile-nan", "cost", "--profile", ",".join(["nan"] * 24), *SPEED, names="--profile"),
    case("cost-prompt-tokens-zero", *COST, "--ttft-ms", "1", "--prompt-tokens", "0", names="--prompt-tokens"),
    case("cost-memory-too-small", *COST, "--ttft-ms", "1", "--memory-mb", "100", names="--memory-mb"),
    case(
        "cost-bench-array",
        "cost",
        "--requests-per-day",
        "9",
        "--from-bench",
        "{json_array}",
        names="--from-bench",
    ),
    case(
        "cost-bench-empty", "cost", "--requests-per-day", "9", "--from-bench", "{empty}", names="--from-bench"
    ),
    case(
        "cost-bench-not-json",
        "cost",
        "--requests-per-day",
        "9",
        "--from-bench",
        "{not_json}",
        names="--from-bench",
    ),
    case(
        "cost-bench-missing",
        "cost",
        "--requests-per-day",
        "9",
        "--from-bench",
        "{missing}",
        names="--from-bench",
    ),
    case(
        "cost-bench-no-speed",
        "cost",
        "--requests-per-day",
        "9",
        "--from-bench",
        "{json_object}",
        names="--from-bench",
    ),
    case("cost-prices-not-toml", *COST, "--ttft-ms", "1", "--prices", "{not_json}", names="--prices"),
    case(
        "cost-plot-missing-folder",
        *("cost", "--requests-per-day", "9", *SPEED, "--plot", "{missing_dir}/cost.png"),
        names="--plot",
    ),
    # --- bench --------------------------------------------------------------------------------------------
    case("bench-no-kind", "bench", names="bench"),
    case("bench-router-requests-negative", "bench", "router", "--requests", "-1", names="--requests"),
    case("bench-router-requests-zero", "bench", "router", "--requests", "0", names="--requests"),
    case("bench-router-max-tokens-zero", "bench", "router", "--max-tokens", "0", names="--max-tokens"),
    case("bench-router-budget-nan", "bench", "router", "--budget-ms", "nan", names="--budget-ms"),
    case("bench-router-endpoint", "bench", "router", "--endpoint", "nowhere", names="--endpoint"),
    case("bench-router-model-not-gguf", "bench", "router", "--model", "/etc/hostname", names="--model"),
    case("bench-grammar-tokens-zero", "bench", "grammar", "--tokens", "0", names="--tokens"),
    case("bench-grammar-model-not-gguf", "bench", "grammar", "--model", "/etc/hostname", names="--model"),
    case("bench-grammar-threads-zero", "bench", "grammar", "--threads", "0", names="--threads"),
    case("bench-engine-threads-repeated", "bench", "engine", "--threads", "1,1", names="--threads"),
    case("bench-engine-threads-zero", "bench", "engine", "--threads", "0,2", names="--threads"),
    case("bench-engine-one-token", "bench", "engine", "--decode-tokens", "1", names="--decode-tokens"),
    case("bench-engine-loads-zero", "bench", "engine", "--loads", "0", names="--loads"),
    case("bench-engine-loads-huge", "bench", "engine", "--loads", "1e9", names="--loads"),
    case("bench-engine-side-unknown", "bench", "engine", "--side", "vllm", names="--side"),
    case("bench-engine-no-side", "bench", "engine", "--no-server", "--side", "llama-server", names="no side"),
    case("bench-coldstart-rounds-zero", "bench", "coldstart", "--rounds", "0", names="--rounds"),
    case("bench-coldstart-prefault", "bench", "coldstart", "--prefault", "bogus", names="--prefault"),
    case("bench-coldstart-model-not-gguf", "bench", "coldstart", "--model", "{not_json}", names="--model"),
    case("bench-coldstart-model-unknown", "bench", "coldstart", "--model", "gpt-9", names="gpt-9"),
    case(
        "bench-coldstart-bad-variable",
        *("bench", "coldstart", "--rounds", "1", "--invokes", "1", "--restores", "1"),
        names="SNAPLLM_MAX_TOKENS",
        env={"SNAPLLM_MAX_TOKENS": "-3"},
    ),
    case(
        "bench-router-bad-variable",
        *("bench", "router", "--requests", "1"),
        names="SNAPLLM_MAX_TOKENS",
        env={"SNAPLLM_MAX_TOKENS": "1e300"},
    ),
    case("bench-aws-no-stack", "bench", "aws", names="--stack"),
    case("bench-aws-cold-negative", "bench", "aws", "--stack", "s", "--cold", "-1", names="--cold"),
    case("bench-aws-budget-inf", "bench", "aws", "--stack", "s", "--budget-usd", "inf", names="--budget-usd"),
    case("bench-aws-no-credentials", "bench", "aws", "--stack", "s", names="credentials"),
    # --- model push ---------------------------------------------------------------------------------------
    case("push-no-file", "model", "push", names="file"),
    case("push-not-gguf", "model", "push", "/etc/hostname", "--stack", "s", names="file"),
    case("push-missing-file", "model", "push", "{missing}", "--stack", "s", names="file"),
    case("push-no-stack", "model", "push", "{tiny_gguf}", names="--stack"),
    case(
        "push-part-size",
        "model",
        "push",
        "{tiny_gguf}",
        "--stack",
        "s",
        "--part-size-mib",
        "1",
        names="--part-size-mib",
    ),
    case("push-no-credentials", "model", "push", "{tiny_gguf}", "--stack", "s", names="credentials"),
    case(
        "push-empty-region",
        *("model", "push", "{tiny_gguf}", "--stack", "s"),
        names="AWS_REGION",
        env={**FAKE_KEYS, "AWS_REGION": ""},
    ),
    # --- keys ----------------------------------------------------------------------------------------------
    case("keys-no-verb", "keys", names="verb"),
    case("keys-no-stack", "keys", "create", names="--stack"),
    case("keys-revoke-no-key", "keys", "revoke", "--stack", "s", names="key"),
    case("keys-stack-not-a-name", "keys", "list", "--stack", "no/such stack", names="no/such stack"),
    case("keys-no-credentials", "keys", "list", "--stack", "s", names="credentials"),
    # --- deploy-check, preflight, settings ------------------------------------------------------------------
    case(
        "deploy-check-override",
        "deploy-check",
        "--parameter-overrides",
        "Architecture",
        names="--parameter-overrides",
    ),
    case("deploy-check-template-missing", "deploy-check", "-t", "{missing}", names="--template"),
    case("deploy-check-template-not-yaml", "deploy-check", "-t", "{not_yaml}", names="not-yaml.yaml"),
    case(
        "preflight-override",
        "preflight",
        "--parameter-overrides",
        "Architecture",
        names="--parameter-overrides",
    ),
    case("preflight-missing-build", "preflight", "{missing_dir}", names="missing-dir"),
    case("preflight-template-not-yaml", "preflight", "{build_not_yaml}", names="template"),
    case("settings-write-missing", "settings", "--write", "{missing}", names="--write"),
    case("settings-write-no-markers", "settings", "--write", "{not_json}", names="--write"),
    case("settings-write-folder", "settings", "--write", "{folder}", names="--write"),
    case("settings-unknown-flag", "settings", "--bogus", names="--bogus"),
    # --- replay and sam-local -------------------------------------------------------------------------------
    case("replay-events-missing", "replay", "--events", "{missing_dir}", names="--events"),
    case("replay-events-no-manifest", "replay", "--events", "{folder}", names="replay.toml"),
    case("replay-model-not-gguf", "replay", "--model", "/etc/hostname", names="--model"),
    case("replay-template-missing", "replay", "-t", "{missing}", names="--template"),
    case("replay-bad-variable", "replay", names="SNAPLLM_N_CTX", env={"SNAPLLM_N_CTX": "nan"}),
    case("sam-local-build-missing", "sam-local", "--build-dir", "{missing_dir}", names="--build-dir"),
    case("sam-local-arch", "sam-local", "--arch", "sparc", names="--arch"),
    case(
        "sam-local-no-docker",
        *("sam-local", "--build-dir", "{folder}"),
        names="Docker",
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    ),
]


@dataclass(frozen=True)
class Outcome:
    names: str  # the case's, with the files' and ports' placeholders filled in
    code: int
    stderr: str
    seconds: float
    leftovers: tuple[str, ...]


def _files(root: Path) -> dict[str, str]:
    (root / "empty").write_text("")
    (root / "not-json.json").write_text("this is not JSON { nor TOML\n")
    (root / "comments.txt").write_text("# keys\n\n# none yet\n")
    (root / "blank-lines.txt").write_text("\n   \n\t\n")
    (root / "not-yaml.yaml").write_text("Resources: [unclosed\n  - {\n")
    (root / "array.json").write_text(json.dumps([{"prompt": "Hi"}]))
    (root / "object.json").write_text(json.dumps({"lifecycle": {}}))
    (root / "tiny.gguf").write_bytes(b"GGUF" + bytes(60))
    (root / "folder").mkdir()
    build = root / "build-not-yaml"
    build.mkdir()
    (build / "template.yaml").write_text("Resources: [unclosed\n")
    return {
        "missing": str(root / "missing.json"),
        "missing_dir": str(root / "missing-dir"),
        "empty": str(root / "empty"),
        "not_json": str(root / "not-json.json"),
        "comments": str(root / "comments.txt"),
        "blank_lines": str(root / "blank-lines.txt"),
        "not_yaml": str(root / "not-yaml.yaml"),
        "json_array": str(root / "array.json"),
        "json_object": str(root / "object.json"),
        "tiny_gguf": str(root / "tiny.gguf"),
        "folder": str(root / "folder"),
        "build_not_yaml": str(build),
    }


def _environment(root: Path, extra: Mapping[str, str], marker: str) -> dict[str, str]:
    """The caller's environment without its AWS, PORT, SNAPLLM_ and POWERTOOLS_ values (no case may reach
    AWS), with the case's own and the marker."""
    (root / "aws-empty").write_text("")
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "SNAPLLM_", "POWERTOOLS_")) and k not in {"PORT", "DOCKER_HOST"}
    }
    return {
        **kept,
        "SNAPLLM_THREADS": TEST_THREADS,
        "AWS_CONFIG_FILE": str(root / "aws-empty"),
        "AWS_SHARED_CREDENTIALS_FILE": str(root / "aws-empty"),
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
        MARKER: marker,
    }


def _left_running(session: int, marker: str) -> list[int]:
    """Processes still in the case's session, or still carrying its marker (one that left the session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        if int(fields[3]) == session or f"{MARKER}={marker}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _run(case: Case, files: Mapping[str, str], root: Path) -> Outcome:
    marker = uuid.uuid4().hex
    argv = [arg.format(**files) for arg in case.argv]
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "snapllm_dev.cli", *argv],
        cwd=REPO,
        env=_environment(root, case.env, marker),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate()
        stderr += f"\n(stopped after {CASE_TIMEOUT_S} s)"
    seconds = time.monotonic() - started
    time.sleep(0.2)  # a child the command stopped on its way out has gone by now
    leftovers = []
    for pid in _left_running(process.pid, marker):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            leftovers.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip())
        os.kill(pid, signal.SIGKILL)  # not to leave it to the next case
    return Outcome(case.names.format(**files), process.returncode, stderr, seconds, tuple(leftovers))


# Run as a user runs them too: one case per kind of work a command does before it fails.
IN_A_PROCESS = (
    "no-command",  # the parser
    "serve-port-in-use",  # a port bound before anything starts
    "serve-bad-variable",  # the local stack started, then a function's configuration
    "invoke-max-tokens-abc",  # the local S3 endpoint and a function's init
    "bench-coldstart-bad-variable",  # a benchmark's own function processes
    "sam-local-no-docker",  # a Docker client
)


def _run_in_process(
    case: Case, files: Mapping[str, str], root: Path, capfd: pytest.CaptureFixture
) -> Outcome:
    """``main(argv)`` in this process, under the case's environment alone, as the process would run it."""
    environment = _environment(root, case.env, uuid.uuid4().hex)
    argv = [arg.format(**files) for arg in case.argv]
    run = run_main(argv, capfd, env=environment, only_env=True)
    return Outcome(case.names.format(**files), run.code, run.stderr, run.seconds, run.leftovers)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Iterator[tuple[dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("cli-hostile")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        yield {**_files(root), "busy_port": str(busy.getsockname()[1])}, root


@pytest.fixture(scope="module")
def outcomes(files) -> dict[str, Outcome]:
    """The cases run as a user runs them, a few at a time."""
    named, root = files
    cases = [c for c in CASES if c.id in IN_A_PROCESS]
    with ThreadPoolExecutor(max_workers=3) as pool:
        return {
            c.id: outcome
            for c, outcome in zip(cases, pool.map(lambda c: _run(c, named, root), cases), strict=True)
        }


def test_the_table_names_each_case_once():
    assert len({c.id for c in CASES}) == len(CASES)
    assert set(IN_A_PROCESS) <= {c.id for c in CASES}


def _check(case: Case, outcome: Outcome) -> None:
    context = f"snapllm {' '.join(case.argv)} (env {dict(case.env)}):\n{outcome.stderr[-3000:]}"
    assert "Traceback" not in outcome.stderr and '  File "' not in outcome.stderr, context
    assert outcome.code == case.code, context
    assert not outcome.leftovers, f"left running: {outcome.leftovers}\n{context}"
    if case.code == 2:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        assert lines and outcome.names in lines[-1], context
        assert lines[-1].startswith(("snapllm", "ERROR preflight")), context


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_command_line(case: Case, files, capfd):
    named, root = files
    _check(case, _run_in_process(case, named, root, capfd))


@pytest.mark.parametrize("case", [c for c in CASES if c.id in IN_A_PROCESS], ids=lambda c: c.id)
def test_hostile_command_line_in_a_process_of_its_own(case: Case, outcomes: dict[str, Outcome]):
    _check(case, outcomes[case.id])

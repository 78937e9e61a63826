#!/usr/bin/env bash
# A private Docker engine for `make sam-local`: Debian's docker.io, dockerd run as root on its own socket,
# stopped by the process id it recorded. Nothing else on the machine is touched (no system service, no
# /var/run/docker.sock), so it can run beside another engine and leaves nothing behind.
#
#   scripts/docker-daemon.sh start    # installs docker.io if needed, starts dockerd, prints DOCKER_HOST
#   scripts/docker-daemon.sh stop     # stops the dockerd that 'start' recorded (and its containerd)
#   scripts/docker-daemon.sh host     # prints DOCKER_HOST
#
# Images are kept under the cache ($SNAPLLM_CACHE_DIR, default ~/.cache/snapllm/docker), so the stand-in base
# image and SAM's images are built once per machine.
set -euo pipefail
cache=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}
run=${SNAPLLM_DOCKER_RUN_DIR:-/run/snapllm-docker}
socket=$run/docker.sock
pidfile=$run/dockerd.pid
log=$run/dockerd.log
host="unix://$socket"

running() {
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start() {
  if ! command -v dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { echo "docker-daemon: install docker.io (apt-get install docker.io)" >&2; exit 1; }
    echo "docker-daemon: installing docker.io" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >&2
  fi
  [ "$(id -u)" = 0 ] || { echo "docker-daemon: dockerd needs root" >&2; exit 1; }
  mkdir -p "$run" "$cache/docker"
  if running; then
    echo "$host"
    return
  fi
  rm -f "$socket" "$pidfile"
  # The engine's own containerd, exec state and socket live under $run; images under the cache.
  # --experimental: Docker 20.10 honours 'docker import --platform' (the arm64 stand-in) only with it.
  # --userland-proxy=false: a published port is NAT, not a proxy that accepts every connection at once, so a
  # connection is refused until the container listens. The SAM CLI waits for a container by connecting, then
  # gives its first request under a second: through the proxy, an emulated arm64 container whose runtime
  # interface emulator was still starting failed with "No response from invoke container".
  setsid dockerd --host "$host" --pidfile "$pidfile" --exec-root "$run/exec" --data-root "$cache/docker/data" \
    --containerd-namespace snapllm --containerd-plugins-namespace snapllm-plugins --experimental --userland-proxy=false \
    >"$log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    if DOCKER_HOST=$host docker version >/dev/null 2>&1; then
      echo "docker-daemon: dockerd $(cat "$pidfile") on $socket" >&2
      echo "$host"
      return
    fi
    sleep 0.5
  done
  echo "docker-daemon: dockerd did not answer within 60 s; its log:" >&2
  tail -n 20 "$log" >&2
  stop
  exit 1
}

stop() {
  if ! running; then
    rm -f "$pidfile"
    return
  fi
  pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile" "$socket"
  echo "docker-daemon: stopped dockerd $pid" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  host) echo "$host" ;;
  *)
    echo "usage: scripts/docker-daemon.sh start|stop|host" >&2
    exit 2
    ;;
esac

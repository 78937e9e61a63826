"""Rewrite the architecture of the images in a `docker save` archive: stdin to stdout.

    docker save TAG | python3 scripts/set-image-architecture.py arm64 | docker load

`docker import --platform` of Docker 20.10 (Debian's docker.io) records the engine's own architecture, so an
arm64 root filesystem imported on x86_64 is labelled amd64 and SAM refuses it for an arm64 function. The
architecture is a field of the image's config, whose SHA-256 is the image id: the config gets a new name.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile


def main(architecture: str) -> None:
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as source:
        members = [(m, source.extractfile(m).read() if m.isfile() else None) for m in source]
    files = {member.name: data for member, data in members}
    manifest = json.loads(files["manifest.json"])
    renamed = {}
    for image in manifest:
        config = json.loads(files[image["Config"]])
        config["architecture"] = architecture
        data = json.dumps(config, separators=(",", ":")).encode()
        name = hashlib.sha256(data).hexdigest() + ".json"
        renamed[image["Config"]] = (name, data)
        image["Config"] = name
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as target:
        for member, data in members:
            if member.name in renamed:
                member.name, data = renamed[member.name]
            elif member.name == "manifest.json":
                data = json.dumps(manifest).encode()
            if data is not None:
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)


if __name__ == "__main__":
    main(sys.argv[1])

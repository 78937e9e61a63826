"""``python -m snapllm.preflight [BUILD_DIR]``: the preflight check without the ``snapllm`` command."""

from snapllm.preflight.cli import main

raise SystemExit(main())

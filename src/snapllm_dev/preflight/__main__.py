"""``python -m snapllm_dev.preflight [BUILD_DIR]``: the preflight check without the ``snapllm`` command."""

from snapllm_dev.preflight.cli import main

raise SystemExit(main())

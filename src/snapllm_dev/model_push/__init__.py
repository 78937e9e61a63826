"""``snapllm model push``: a model on disk into the stack's bucket, then a stack update that publishes new
versions of the functions that load it."""

"""``snapllm test-models``: small GGUF models of each family people deploy, made here from packaged
tokenizers and templates, with random weights, for the tests (see :mod:`snapllm_dev.testmodels.build`)."""

"""What the tests run against besides the code under test: helper servers (llama-cpp-python's server, an
MCP server, S3-like file servers, ``snapllm local serve``), shared inputs (hostile schemas, the repository's
paths) and instruments (the grammar sampler, the CLI as a subprocess).

Test modules import from here and never from one another (``tests/unit/test_test_layout.py`` keeps it so);
nothing here is a test.
"""

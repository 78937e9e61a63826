"""The routes a model function answers besides the completions: tokens, token counts, embeddings,
reranking, and their dispatch."""

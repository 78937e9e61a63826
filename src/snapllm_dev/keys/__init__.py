"""``snapllm keys create|list|revoke --stack NAME``: the API keys of a stack deployed with ``ApiAuth=KEY``."""

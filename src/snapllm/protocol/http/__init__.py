"""What the HTTP edge checks in raw input, the decision for every OpenAI request field, and the OpenAPI
documentation of errors."""

"""Chat Completions and Completions: a chat request rendered to a prompt and a grammar, and the engine's
output rendered back as whole objects or a server-sent event stream (Responses objects and events too)."""

"""The Responses API: its request, checked and turned into the chat request the engine serves."""

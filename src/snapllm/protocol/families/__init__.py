"""What differs by model family: tool-call formats, thinking markers, and calls a model writes bare."""

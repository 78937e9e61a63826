"""JSON schemas compiled to llguidance grammars and validators, tool-call arguments, Lark grammar pieces,
and the check of a finished answer against its schema."""

"""`make sam-local`: the built functions in Lambda containers through the real SAM CLI (needs Docker)."""

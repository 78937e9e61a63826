"""The router's route groups, one Powertools ``Router`` each, included by ``RouterApp``."""

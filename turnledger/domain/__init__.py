"""The pure domain of turnledger: messages, turns, estimates, budgets, trimming, events, decider.

Nothing here does I/O; every rule R1-R40 of docs/behaviour.md is defined once in one of these
modules.
"""

"""The pure domain of turnledger: messages, turns, estimates, budgets, trimming, events, decider.

Nothing here does I/O; every rule of SPEC.md R1-R40 is defined once in one of these modules.
"""

"""The agent frameworks' own test suites, run against turnledger (issue 22): one module each,
``python -m conformance.<framework>``; nothing of theirs is copied into this repository."""

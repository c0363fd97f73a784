"""Conformance steps: the frameworks' own test suites run against turnledger (issue 22).

Each module is runnable (``python -m conformance.NAME``); it fetches the installed framework's
source distribution into a temporary directory, runs its tests there and never copies them
into this repository.
"""

"""turnledger."""

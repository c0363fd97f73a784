"""turnledger's HTTP server: the OpenAI Conversations API on a turnledger store (issue 37).

Needs the ``server`` extra (Starlette and uvicorn); ``turnledger serve`` runs it. `create_app`
is imported from `turnledger.server.app`; this package's ``__init__`` imports nothing so that
`turnledger.server.ids` loads without the extra.
"""

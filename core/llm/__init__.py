"""Language models: `client.py` (the `LLMClient` protocol, the OpenAI-compatible client, token counting) and
`embedded.py` (the offline demo model run in-process)."""

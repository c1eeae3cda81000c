"""Forgetting, the storage side: `target.py` (what a forget is about), `fence.py` (background work cannot write
into a forgotten scope), `requests.py` (`/forget <what>` questions awaiting an answer), `privacy_scan.py` (proof, byte
by byte, that it is gone). The service every route uses is `core/forgetting.py`."""

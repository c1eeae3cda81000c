"""Search: the hybrid engine and what feeds it.

`index.py` (`SearchIndex`: meaning and words fused), `lexical.py` (BM25 for English and Chinese), `embedding.py`
(offline embedders; each lane embeds what waits in one call), `e5_onnx.py` (e5 on ONNX Runtime in int8, texts in
batches of similar lengths), `scope_cache.py` (per-scope snapshots).
"""

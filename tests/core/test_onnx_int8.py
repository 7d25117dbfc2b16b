"""Int8 query kernels: the graph rewrite on small models, and the packaged model's query path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from recalld import threads
from recalld.config import load_settings
from recalld.providers.embedders import Embedder, resolve_embedder, sharing_cores
from recalld.providers.onnx import OnnxEmbedder
from recalld.providers.onnx_int8 import int8_query_graph, signed_products_exact

RNG = np.random.default_rng(7)
WEIGHT = RNG.integers(-127, 128, size=(8, 5), dtype=np.int8)
COLUMN_SCALES = RNG.uniform(0.01, 0.05, size=(1, 5)).astype(np.float32)
TABLE = RNG.integers(-127, 128, size=(6, 8), dtype=np.int8)
ROW_SCALES = RNG.uniform(0.01, 0.05, size=(6, 1)).astype(np.float32)


def _dequantize(prefix: str, scale_first: bool = False) -> list[onnx.NodeProto]:
    """``prefix`` = Mul(Cast(``prefix``_q), ``prefix``_scale), as the packaged model writes it."""
    operands = [f"{prefix}_f", f"{prefix}_scale"]
    return [
        helper.make_node("Cast", [f"{prefix}_q"], [f"{prefix}_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", operands[::-1] if scale_first else operands, [prefix]),
    ]


def _save(tmp_path: Path, nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray]) -> Path:
    """A model: token ids -> table lookup -> product with the weight -> ``y``."""
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 5])],
        [numpy_helper.from_array(value, name) for name, value in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path / "toy.onnx"
    onnx.save(model, str(path))
    return path


def _quantized_toy(tmp_path: Path, scale_first: bool = False) -> Path:
    nodes = [
        *_dequantize("table", scale_first),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        *_dequantize("weight", scale_first),
        helper.make_node("MatMul", ["rows", "weight"], ["y"]),
    ]
    inits = {
        "table_q": TABLE,
        "table_scale": ROW_SCALES,
        "weight_q": WEIGHT,
        "weight_scale": COLUMN_SCALES,
    }
    return _save(tmp_path, nodes, inits)


def _run(model: bytes | str, ids: list[int], output: str = "y") -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run([output], {"ids": np.array(ids, dtype=np.int64)})[0]
    return result


@pytest.mark.parametrize("scale_first", [False, True])
def test_the_rewrite_multiplies_in_int8_and_keeps_the_products_close(
    tmp_path: Path, scale_first: bool
) -> None:
    path = _quantized_toy(tmp_path, scale_first)
    rewritten = int8_query_graph(path)
    assert rewritten is not None
    graph_bytes, count = rewritten
    assert count == 2  # the product and the lookup
    ops = [node.op_type for node in onnx.load_from_string(graph_bytes).graph.node]
    assert ops.count("DynamicQuantizeMatMul") == 1
    assert "MatMul" not in ops
    ids = [0, 3, 5, 3]
    expected = (TABLE[ids] * ROW_SCALES[ids]) @ (WEIGHT * COLUMN_SCALES)
    float_out, int8_out = _run(str(path), ids), _run(graph_bytes, ids)
    np.testing.assert_allclose(float_out, expected, rtol=1e-5, atol=1e-6)
    # uint8 activations: each product is off by at most a few quantisation steps.
    assert np.max(np.abs(int8_out - expected)) < 0.02 * np.max(np.abs(expected))
    assert not np.allclose(int8_out, expected, rtol=0, atol=1e-7)  # it did run in int8


def test_the_lookup_rewrite_is_exact(tmp_path: Path) -> None:
    """Dequantising the looked-up rows gives the same floats as looking up dequantised rows."""
    nodes = [*_dequantize("table"), helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    path = _save(tmp_path, nodes, {"table_q": TABLE[:, :5], "table_scale": ROW_SCALES})
    rewritten = int8_query_graph(path)
    assert rewritten is not None
    ids = [5, 0, 2]
    np.testing.assert_array_equal(_run(rewritten[0], ids), _run(str(path), ids))
    initializers = onnx.load_from_string(rewritten[0]).graph.initializer
    assert {i.name: i.data_type for i in initializers}["table_q"] == TensorProto.INT8


def test_a_float_model_has_nothing_to_rewrite(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("MatMul", ["rows", "weight"], ["y"]),
    ]
    inits = {"table": TABLE.astype(np.float32), "weight": WEIGHT.astype(np.float32)}
    assert int8_query_graph(_save(tmp_path, nodes, inits)) is None


def test_a_dequantised_matrix_read_twice_is_left_alone(tmp_path: Path) -> None:
    """Moving a shared matrix into one node would leave the other reading nothing."""
    nodes = [
        *_dequantize("weight"),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("MatMul", ["rows", "weight"], ["a"]),
        helper.make_node("MatMul", ["rows", "weight"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    inits = {"table": TABLE.astype(np.float32), "weight_q": WEIGHT, "weight_scale": COLUMN_SCALES}
    assert int8_query_graph(_save(tmp_path, nodes, inits)) is None


def test_scales_that_fit_neither_rows_nor_columns_are_left_alone(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        *_dequantize("weight"),
        helper.make_node("MatMul", ["rows", "weight"], ["y"]),
    ]
    inits = {
        "table": TABLE.astype(np.float32),
        "weight_q": WEIGHT,
        "weight_scale": RNG.uniform(0.01, 0.05, size=(8, 1)).astype(np.float32),  # per row
    }
    assert int8_query_graph(_save(tmp_path, nodes, inits)) is None


SENTENCES = [
    "I adopted a puppy named Rex last week",
    "My sister arrives from Lisbon on Friday",
    "The quarterly report is due at the end of March",
    "I switched from coffee to green tea in the mornings",
]
QUERIES = [
    "what pet did I get?",
    "when is my sister coming?",
    "when is the report due?",
    "what do I drink in the morning?",
]


@pytest.fixture(scope="module")
def float_queries() -> OnnxEmbedder:
    return OnnxEmbedder.packaged(int8_queries=False)


def test_the_packaged_model_embeds_queries_in_int8(
    local_embedder: Embedder, float_queries: OnnxEmbedder
) -> None:
    assert isinstance(local_embedder, OnnxEmbedder)
    assert local_embedder.int8_nodes == 38  # 36 products, the token and position tables
    assert float_queries.int8_nodes == 0
    # Bench reports name the query path next to the fingerprint, which both share.
    assert local_embedder.query_path == "queries in int8 (38 nodes)"
    assert float_queries.query_path == ""
    for query in QUERIES:
        int8 = local_embedder.embed_query(query)
        exact = float_queries.embed_query(query)
        assert 0.98 < float(int8 @ exact) < 1.0 - 1e-6
        assert np.isclose(np.linalg.norm(int8), 1.0, atol=1e-5)


def test_queries_run_on_one_thread_that_does_not_spin(
    local_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the state of the process and the machine: onnxruntime's default pool would
    take about twice the CPU for a lone query (a server runs a process per core)."""
    assert isinstance(local_embedder, OnnxEmbedder)
    monkeypatch.setattr(threads, "machine_busy", lambda: False)
    with threads.searching():  # the one search of an idle process
        session = local_embedder._query()
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with threads.searching(), threads.searching(), sharing_cores():
        assert local_embedder._query() is session


def _products(graph: bytes) -> list[tuple[int, ...]]:
    """The weight types and zero points of each int8 product of a query graph."""
    model = onnx.load_from_string(graph)
    inits = {i.name: i for i in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type == "DynamicQuantizeMatMul":
            weight = inits[node.input[1]]
            zero = numpy_helper.to_array(inits[node.input[3]]) if len(node.input) > 3 else None
            found.append((weight.data_type, -1 if zero is None else int(zero.max())))
    return found


def test_signed_products_give_the_same_floats_as_unsigned(tmp_path: Path) -> None:
    """The toy's product on int8 weights (no zero point) and on weights shifted to uint8
    (zero point 128): the same integers summed, so the same floats where this machine's
    kernel sums them exactly, which the probe tells."""
    path = _quantized_toy(tmp_path)
    signed, unsigned = int8_query_graph(path, signed=True), int8_query_graph(path)
    assert signed is not None and unsigned is not None
    assert _products(signed[0]) == [(TensorProto.INT8, -1)]
    assert _products(unsigned[0]) == [(TensorProto.UINT8, 128)]
    assert signed[1] == unsigned[1] == 2
    ids = [0, 3, 5, 3, 1]
    if signed_products_exact():
        np.testing.assert_array_equal(_run(signed[0], ids), _run(unsigned[0], ids))


def test_the_probe_reaches_where_a_16_bit_kernel_saturates() -> None:
    """A kernel that adds each pair of byte products in 16 bits with saturation (AVX2's
    ``vpmaddubsw``) gives other integers for the probe's inputs than exact sums, so the probe
    tells it apart: simulated here on the activations as ``DynamicQuantizeMatMul``
    quantises them (asymmetric uint8 over the whole tensor)."""
    from recalld.providers import onnx_int8

    x, weights, _ = onnx_int8.probe_inputs()
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (high - low) / 255
    zero = np.clip(np.rint(-low / scale), 0, 255)
    quantised = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.int64)
    terms = quantised[:, :, None] * weights.astype(np.int64)[None, :, :]  # (rows, depth, cols)
    exact = terms.sum(axis=1)
    pairs = terms.reshape(len(x), -1, 2, weights.shape[1]).sum(axis=2)
    int16 = np.iinfo(np.int16)
    saturated = np.clip(pairs, int16.min, int16.max).sum(axis=1)
    assert not np.array_equal(saturated, exact)
    assert np.array_equal(np.clip(pairs, -(2**31), 2**31 - 1).sum(axis=1), exact)


def test_the_packaged_query_graph_uses_signed_products_where_exact(
    local_embedder: Embedder,
) -> None:
    """Where this machine's kernel is exact for them, the query's products read the model's
    own int8 weights (about 45% less CPU a query on VNNI processors), and the query vectors
    are the very floats of the unsigned products."""
    assert isinstance(local_embedder, OnnxEmbedder)
    graph = int8_query_graph(local_embedder._model_path, signed=signed_products_exact())
    unsigned = int8_query_graph(local_embedder._model_path)
    assert graph is not None and unsigned is not None
    kinds = {kind for kind, _ in _products(graph[0])}
    assert kinds == {TensorProto.INT8 if signed_products_exact() else TensorProto.UINT8}
    session = local_embedder._query()
    vectors = np.stack([local_embedder.embed_query(q) for q in QUERIES])
    local_embedder._query_session = ort.InferenceSession(
        unsigned[0], providers=["CPUExecutionProvider"]
    )
    try:
        np.testing.assert_array_equal(
            np.stack([local_embedder.embed_query(q) for q in QUERIES]), vectors
        )
    finally:
        local_embedder._query_session = session


def test_a_query_longer_than_the_window_runs_in_int8_too(
    local_embedder: Embedder, float_queries: OnnxEmbedder
) -> None:
    """A long query's windows run as one padded batch; the activations are quantised over
    all of it, and the vector still stays close to float32's."""
    query = " ".join(SENTENCES * 30)  # about 1,000 words: five windows
    assert local_embedder.embed_documents([query]).windows == (5,)
    assert float(local_embedder.embed_query(query) @ float_queries.embed_query(query)) > 0.98


def test_documents_are_embedded_in_float32_either_way(
    local_embedder: Embedder, float_queries: OnnxEmbedder
) -> None:
    np.testing.assert_array_equal(
        local_embedder.embed_documents(SENTENCES).vectors,
        float_queries.embed_documents(SENTENCES).vectors,
    )
    assert local_embedder.fingerprint == float_queries.fingerprint
    # With int8 products off, a query is embedded exactly as the same text stored.
    np.testing.assert_array_equal(
        float_queries.embed_query(SENTENCES[0]),
        float_queries.embed_documents(SENTENCES[:1]).vectors[0],
    )


def test_int8_queries_still_find_their_memories(local_embedder: Embedder) -> None:
    stored = local_embedder.embed_documents(SENTENCES).vectors
    for expected, query in enumerate(QUERIES):
        assert int(np.argmax(stored @ local_embedder.embed_query(query))) == expected


def test_the_setting_turns_int8_queries_off(tmp_path: Path) -> None:
    empty = tmp_path / "config.toml"
    empty.write_text("", encoding="utf-8")
    settings = load_settings(environ={"RECALLD_INT8_QUERIES": "false"}, config_file=empty)
    assert settings.int8_queries is False
    embedder = resolve_embedder("local", settings)
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.int8_nodes == 0


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every model the query graph is built from, from now on."""
    import recalld.providers.onnx as onnx_provider

    models: list[Path] = []

    def counting(model_path: Path, signed: bool = False) -> tuple[bytes, int] | None:
        models.append(model_path)
        return int8_query_graph(model_path, signed)

    monkeypatch.setattr(onnx_provider, "int8_query_graph", counting)
    return models


def test_the_query_graph_is_built_on_the_first_query_only(built: list[Path]) -> None:
    """Storing never pays for the query session; querying builds it once."""
    embedder = OnnxEmbedder.packaged()
    embedder.embed_documents(SENTENCES)
    assert built == []
    first = embedder.embed_query(QUERIES[0])
    second = embedder.embed_query(QUERIES[0])
    assert len(built) == 1
    np.testing.assert_array_equal(first, second)
    assert embedder.int8_nodes == 38


def test_concurrent_first_queries_build_the_query_graph_once(built: list[Path]) -> None:
    import threading

    embedder = OnnxEmbedder.packaged()
    start = threading.Barrier(4)
    vectors: list[np.ndarray] = []

    def first_query() -> None:
        start.wait(timeout=30)
        vectors.append(embedder.embed_query(QUERIES[1]))

    threads = [threading.Thread(target=first_query) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(built) == 1
    assert len(vectors) == 4
    for vector in vectors[1:]:
        np.testing.assert_array_equal(vector, vectors[0])


def test_a_query_graph_that_cannot_be_built_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import recalld.providers.onnx as onnx_provider
    from recalld.errors import EmbedderError

    def broken(model_path: Path, signed: bool = False) -> tuple[bytes, int] | None:
        raise ValueError("graph is damaged")

    monkeypatch.setattr(onnx_provider, "int8_query_graph", broken)
    embedder = OnnxEmbedder.packaged()
    assert embedder.embed_documents(SENTENCES[:1]).vectors.shape == (1, 384)
    with pytest.raises(EmbedderError, match="int8_queries = false"):
        embedder.embed_query(QUERIES[0])


def test_a_runtime_that_cannot_run_the_probe_keeps_the_unsigned_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refusing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no DynamicQuantizeMatMul in this build")

    signed_products_exact.cache_clear()
    monkeypatch.setattr(ort, "InferenceSession", refusing)
    try:
        assert signed_products_exact() is False
    finally:
        monkeypatch.undo()
        signed_products_exact.cache_clear()

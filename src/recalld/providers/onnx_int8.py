"""Int8 matrix kernels for the query path of a weight-only int8 ONNX encoder.

The packaged model keeps each weight matrix as int8 with one float scale per column, and
feeds it to ``MatMul`` through ``Cast`` and ``Mul``. ONNX Runtime folds that pair into a
float32 matrix when it loads the model, so every product runs in float32 over 42 MB of
weights (more than the 32 MB last-level cache of the benchmark machine).

:func:`int8_query_graph` rewrites each such product as ONNX Runtime's
``DynamicQuantizeMatMul``, which quantises the activations to uint8 on each call and
multiplies them in integer arithmetic against 11 MB of 8-bit weights. The weights are
shifted to uint8 (zero point 128): with signed weights, AVX2's byte product sums pairs
into 16 bits and saturates (full-range random weights came out wrong by 7% of the largest
output), while two unsigned operands are widened and summed in 32 bits. The token and
position tables, stored the same way, are looked up in int8 and only the rows a query
uses are dequantised, so the second session holds no 47 MB float32 vocabulary.

On 2 AVX2 cores, inside searches, a query embedding takes 4.9 ms against 7.2-7.4 ms in
float32 (docs/benchmarks.md has the runs).

Where the processor multiplies unsigned by signed bytes into 32 bits without a 16-bit
step (VNNI's ``vpdpbusd``, AMX), ONNX Runtime's kernel for signed weights is exact too, and
faster than its unsigned-by-unsigned one, which widens both operands first: the query's
products then read the model's own int8 weights with no zero point (2.2 against 4.0 ms of
CPU a query on one thread, 2026-11-28). Both sum the same integers, ``(a - za) * w``, so the
vectors are the same to the bit; :func:`signed_products_exact` checks it on this machine's
kernels once per process, on products whose pairs overflow 16 bits, before the faster form
is used. The price is precision: over 493 benchmark
questions the int8 query vector's cosine to the float32 one is 0.995 on average, 0.990
at worst. Only queries take this path. Stored vectors keep coming from the float32 graph,
so a store's vectors, and its embedder fingerprint, do not depend on it.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

MS_DOMAIN = "com.microsoft"
"""ONNX Runtime's contrib-operator domain, where ``DynamicQuantizeMatMul`` lives."""


def int8_query_graph(model_path: Path, signed: bool = False) -> tuple[bytes, int] | None:
    """The model at ``model_path`` with its dequantise-then-use weights used in int8.

    ``Mul(Cast(W), scale)`` (either operand order; ``W`` a 2-D int8 initializer, ``scale`` a
    float one) dequantises a matrix. Read by a ``MatMul`` with one scale, or one per column,
    it becomes a ``DynamicQuantizeMatMul``; read by a row ``Gather`` with one scale, or one
    per row, the lookup moves ahead of the dequantisation. Nodes and initializers left
    without a reader are dropped.

    ``signed``: the products read the int8 weights as they are (zero point 0), else shifted
    to uint8 (zero point 128); the same results where :func:`signed_products_exact` holds.

    Returns the serialised model and the number of nodes rewritten, or ``None`` when the
    graph has no such node (a float32 model, say): the caller then has nothing to gain
    from a second session.
    """
    import onnx

    model = onnx.load(str(model_path))
    rewrite = _Rewrite(model.graph, signed)
    nodes: list[Any] = []
    rewritten = 0
    for node in model.graph.node:
        replacement = rewrite.node(node)
        nodes += replacement or [node]
        rewritten += replacement is not None
    if not rewritten:
        return None
    nodes, wanted = _live(nodes, {out.name for out in model.graph.output})
    kept = [init for init in [*model.graph.initializer, *rewrite.added] if init.name in wanted]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    if not any(op.domain == MS_DOMAIN for op in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    return model.SerializeToString(), rewritten


class _Rewrite:
    """The int8 replacement of each node of one graph; new initializers gather in ``added``."""

    def __init__(self, graph: Any, signed: bool = False) -> None:
        self.signed = signed
        self.producer = {out: node for node in graph.node for out in node.output}
        self.readers = Counter(name for node in graph.node for name in node.input)
        self.inits = {init.name: init for init in graph.initializer}
        self.added: list[Any] = []

    def node(self, node: Any) -> list[Any] | None:
        """The nodes that replace ``node``, or ``None`` to keep it."""
        if node.op_type == "MatMul":
            found = self._dequantized(node.input[1], axis=1)
            return None if found is None else self._product(node, *found)
        if node.op_type == "Gather" and all(a.name != "axis" or a.i == 0 for a in node.attribute):
            found = self._dequantized(node.input[0], axis=0)
            return None if found is None else self._lookup(node, *found)
        return None

    def _dequantized(self, name: str, axis: int) -> tuple[Any, np.ndarray] | None:
        """``(int8 initializer, one scale per index of axis)`` when ``name`` is an int8
        matrix dequantised for this one reader."""
        from onnx import TensorProto, numpy_helper

        mul = self.producer.get(name)
        if mul is None or mul.op_type != "Mul" or self.readers[name] != 1:
            return None
        for cast_in, scale_in in (mul.input, reversed(mul.input)):
            cast = self.producer.get(cast_in)
            if cast is None or cast.op_type != "Cast" or self.readers[cast_in] != 1:
                continue
            weight, scale = self.inits.get(cast.input[0]), self.inits.get(scale_in)
            if weight is None or scale is None or len(weight.dims) != 2:
                continue
            if weight.data_type != TensorProto.INT8 or scale.data_type != TensorProto.FLOAT:
                continue
            count = int(weight.dims[axis])
            scales = numpy_helper.to_array(scale).astype(np.float32).reshape(-1)
            if scales.size == 1:
                return weight, np.full(count, scales[0], dtype=np.float32)
            if scales.size == count:
                return weight, scales
        return None

    def _product(self, node: Any, weight: Any, scales: np.ndarray) -> list[Any]:
        """``x @ (W * s)`` -> ``DynamicQuantizeMatMul(x, W, s)`` (``signed``), else
        ``DynamicQuantizeMatMul(x, W + 128, s, 128)``."""
        from onnx import numpy_helper

        prefix = node.name or node.output[0]
        scale = f"{prefix}_b_scale"
        self.added.append(numpy_helper.from_array(scales, scale))
        if self.signed:
            return [_quantized_product(node, [weight.name, scale], f"{prefix}_int8")]
        shifted = (numpy_helper.to_array(weight).astype(np.int16) + 128).astype(np.uint8)
        names = [f"{prefix}_b", f"{prefix}_b_zero_point"]
        values = [shifted, np.full(scales.size, 128, np.uint8)]
        self.added += [numpy_helper.from_array(v, n) for v, n in zip(values, names, strict=True)]
        return [_quantized_product(node, [names[0], scale, names[1]], f"{prefix}_int8")]

    def _lookup(self, node: Any, weight: Any, scales: np.ndarray) -> list[Any]:
        """``(W * s)[ids]`` -> ``W[ids] * s[ids]``: the same floats, from an int8 table."""
        from onnx import TensorProto, helper, numpy_helper

        prefix = node.name or node.output[0]
        ids = node.input[1]
        self.added.append(numpy_helper.from_array(scales.reshape(-1, 1), f"{prefix}_row_scale"))
        return [
            helper.make_node("Gather", [weight.name, ids], [f"{prefix}_q"], axis=0),
            helper.make_node("Cast", [f"{prefix}_q"], [f"{prefix}_f"], to=TensorProto.FLOAT),
            helper.make_node("Gather", [f"{prefix}_row_scale", ids], [f"{prefix}_s"], axis=0),
            helper.make_node("Mul", [f"{prefix}_f", f"{prefix}_s"], list(node.output)),
        ]


def _quantized_product(node: Any, weights: list[str], name: str) -> Any:
    """``DynamicQuantizeMatMul`` of ``node``'s activations with ``weights`` (the matrix, its
    scales, its zero points if any) into ``node``'s outputs."""
    from onnx import helper

    inputs = [node.input[0], *weights]
    return helper.make_node(
        "DynamicQuantizeMatMul", inputs, list(node.output), name=name, domain=MS_DOMAIN
    )


PROBE_DEPTH = 64
"""Terms summed by each product of the probe: enough for the kernels' full-width paths."""
PROBE_COLUMNS = 32


def probe_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The probe's activations, int8 weights and column scales: random, with a row of 1.0
    and one of -1.0 (quantised to 255 and 0, the largest terms of either sign) and a column
    of 127 and one of -128."""
    rng = np.random.default_rng(45)
    weights = rng.integers(-128, 128, size=(PROBE_DEPTH, PROBE_COLUMNS), dtype=np.int8)
    weights[:, 0], weights[:, 1] = 127, -128
    scales = rng.uniform(0.01, 0.05, size=PROBE_COLUMNS).astype(np.float32)
    x = rng.uniform(-1.0, 1.0, size=(4, PROBE_DEPTH)).astype(np.float32)
    x[0], x[1] = 1.0, -1.0
    return x, weights, scales


@functools.cache
def signed_products_exact() -> bool:
    """Whether this machine's ``DynamicQuantizeMatMul`` gives, with int8 weights, the very
    floats it gives with the same weights shifted to uint8 (zero point 128).

    Both sum ``(a - za) * w`` in integers; a kernel that first adds pairs of byte products
    in 16 bits (AVX2's ``vpmaddubsw``) saturates with signed weights, one that sums them in
    32 bits does not. The probe's activations quantise to 255 and 0 and its weights include
    whole columns of 127 and -128, so a pair reaches +-65,000, past 16 bits: any kernel that
    saturates gives other floats here. Asked once per process (a few milliseconds); a
    runtime that cannot run the probe answers False."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    x, weights, scales = probe_inputs()
    shifted = (weights.astype(np.int16) + 128).astype(np.uint8)
    inits = {
        "w": weights,
        "u": shifted,
        "s": scales,
        "z": np.full(PROBE_COLUMNS, 128, np.uint8),
    }
    nodes = [
        helper.make_node("DynamicQuantizeMatMul", ["x", "w", "s"], ["signed"], domain=MS_DOMAIN),
        helper.make_node(
            "DynamicQuantizeMatMul", ["x", "u", "s", "z"], ["unsigned"], domain=MS_DOMAIN
        ),
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, PROBE_COLUMNS])
        for name in ("signed", "unsigned")
    ]
    graph = helper.make_graph(
        nodes,
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, PROBE_DEPTH])],
        outputs,
        [numpy_helper.from_array(value, name) for name, value in inits.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        signed, unsigned = session.run(None, {"x": x})
    except Exception:  # a runtime that cannot run the probe: keep the uint8 weights
        return False
    return bool(np.array_equal(signed, unsigned))


def _live(nodes: list[Any], outputs: set[str]) -> tuple[list[Any], set[str]]:
    """``nodes`` without those whose results no node, and no graph output, reads; and the
    names the remaining ones read (with the outputs), which tell the initializers to keep."""
    while True:
        wanted = {name for node in nodes for name in node.input} | outputs
        live = [node for node in nodes if any(out in wanted for out in node.output)]
        if len(live) == len(nodes):
            return live, wanted
        nodes = live

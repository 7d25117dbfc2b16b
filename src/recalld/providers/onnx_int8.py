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
float32 (docs/benchmarks.md has the runs). The price is precision: over 493 benchmark
questions the int8 query vector's cosine to the float32 one is 0.995 on average, 0.990
at worst. Only queries take this path. Stored vectors keep coming from the float32 graph,
so a store's vectors, and its embedder fingerprint, do not depend on it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

MS_DOMAIN = "com.microsoft"
"""ONNX Runtime's contrib-operator domain, where ``DynamicQuantizeMatMul`` lives."""


def int8_query_graph(model_path: Path) -> tuple[bytes, int] | None:
    """The model at ``model_path`` with its dequantise-then-use weights used in int8.

    ``Mul(Cast(W), scale)`` (either operand order; ``W`` a 2-D int8 initializer, ``scale`` a
    float one) dequantises a matrix. Read by a ``MatMul`` with one scale, or one per column,
    it becomes a ``DynamicQuantizeMatMul``; read by a row ``Gather`` with one scale, or one
    per row, the lookup moves ahead of the dequantisation. Nodes and initializers left
    without a reader are dropped.

    Returns the serialised model and the number of nodes rewritten, or ``None`` when the
    graph has no such node (a float32 model, say): the caller then has nothing to gain
    from a second session.
    """
    import onnx

    model = onnx.load(str(model_path))
    rewrite = _Rewrite(model.graph)
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

    def __init__(self, graph: Any) -> None:
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
        """``x @ (W * s)`` -> ``DynamicQuantizeMatMul(x, W + 128, s, 128)``."""
        from onnx import helper, numpy_helper

        prefix = node.name or node.output[0]
        shifted = (numpy_helper.to_array(weight).astype(np.int16) + 128).astype(np.uint8)
        names = [f"{prefix}_b", f"{prefix}_b_scale", f"{prefix}_b_zero_point"]
        values = [shifted, scales, np.full(scales.size, 128, np.uint8)]
        self.added += [numpy_helper.from_array(v, n) for v, n in zip(values, names, strict=True)]
        return [
            helper.make_node(
                "DynamicQuantizeMatMul",
                [node.input[0], *names],
                list(node.output),
                name=f"{prefix}_int8",
                domain=MS_DOMAIN,
            )
        ]

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


def _live(nodes: list[Any], outputs: set[str]) -> tuple[list[Any], set[str]]:
    """``nodes`` without those whose results no node, and no graph output, reads; and the
    names the remaining ones read (with the outputs), which tell the initializers to keep."""
    while True:
        wanted = {name for node in nodes for name in node.input} | outputs
        live = [node for node in nodes if any(out in wanted for out in node.output)]
        if len(live) == len(nodes):
            return live, wanted
        nodes = live

"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint.

That is OpenAI, OpenRouter, Ollama, vLLM, LM Studio and any other server speaking the API.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from recalld.errors import EmbedderError
from recalld.providers.embedding import Embedder, EmbeddingBatch, Fingerprint, l2_normalize


class OpenAIEmbedder(Embedder):
    """Calls ``POST {base_url}/embeddings``; vectors are L2-normalised on arrival."""

    batch_size = 64

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self._model = model
        self._dimensions = dimensions
        self._prefixes = {"query_prefix": query_prefix, "document_prefix": document_prefix}
        self._fingerprint: Fingerprint | None = None

    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            # The dimension is only known once the endpoint has answered.
            probe = self._request(["dimension probe"])
            self._fingerprint = Fingerprint(
                f"openai:{self._model}",
                probe.shape[1],
                "provider",
                True,
                8191,
                "provider",
                **self._prefixes,
            )
        return self._fingerprint

    def _request(self, texts: Sequence[str]) -> np.ndarray:
        body: dict[str, object] = {"model": self._model, "input": list(texts)}
        if self._dimensions:
            body["dimensions"] = self._dimensions
        try:
            response = self._client.post("/embeddings", json=body)
        except httpx.HTTPError as exc:
            raise EmbedderError(f"embedding endpoint unreachable: {exc}") from exc
        if response.status_code != 200:
            raise EmbedderError(
                f"embedding endpoint answered {response.status_code}: {response.text[:300]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            indexes = [item["index"] for item in data]
            matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"embedding endpoint sent an unexpected body: {exc}") from exc
        if indexes != list(range(len(texts))):
            raise EmbedderError(
                f"embedding endpoint sent indexes {indexes[:10]} for {len(texts)} texts"
            )
        if matrix.ndim != 2 or len(matrix) != len(texts) or matrix.shape[1] == 0:
            raise EmbedderError(f"expected {len(texts)} embeddings, got shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise EmbedderError("embedding endpoint sent non-finite numbers (NaN or infinity)")
        return matrix

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        prefix = self._prefixes["query_prefix" if is_query else "document_prefix"]
        matrix = self._request([prefix + t for t in texts])
        if matrix.shape[1] != self.fingerprint.dimension:
            raise EmbedderError(
                f"endpoint changed dimension: {matrix.shape[1]} != {self.fingerprint.dimension}"
            )
        return EmbeddingBatch(l2_normalize(matrix), (1,) * len(texts))

    def close(self) -> None:
        self._client.close()

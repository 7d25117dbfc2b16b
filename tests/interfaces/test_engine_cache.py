"""The servers' one engine cache: one engine per tenant grant, one embedder, the same models."""

from __future__ import annotations

from pathlib import Path

from recalld.config import Settings
from recalld.interfaces.engines import Engines
from recalld.interfaces.http import create_app
from recalld.retrieval.models import Models


def test_every_tenant_shares_the_embedder_and_the_models_given(tmp_path: Path) -> None:
    models = Models()
    engines = Engines(
        Settings(db=tmp_path / "m.db", cache_dir=None, embedder="fake"), models=models
    )
    try:
        alice, bob = engines.get("alice"), engines.get("bob", ["team"])
        assert engines.get("alice") is alice and alice is not bob
        assert alice.models is models and bob.models is models
        assert alice.embedder is bob.embedder
        assert engines.root is engines.get()
    finally:
        engines.close()


def test_the_http_app_and_its_mcp_tools_share_one_cache(tmp_path: Path) -> None:
    from recalld.interfaces.mcp import mcp_extension

    models = Models()
    settings = Settings(db=tmp_path / "m.db", cache_dir=None, embedder="fake")
    app = create_app(settings, models=models, extensions=[mcp_extension])
    state = app.state.recalld
    try:
        assert isinstance(state.engines, Engines)
        assert state.engine_for("carol").models is models
        assert state.auth.engines is state.engines
    finally:
        state.close()

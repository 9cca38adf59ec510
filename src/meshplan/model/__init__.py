"""Model specs: read Hugging Face configs and derive parameters, FLOPs and KV-cache bytes."""

from meshplan.model.catalog_index import CatalogEntry, get_entry, list_entries
from meshplan.model.load import from_config, load_model, supported_families
from meshplan.model.spec import (
    AttentionSpec, DenseMLP, LayerSpec, MLASpec, ModelSpec, MoEMLP,
)

__all__ = [
    "AttentionSpec", "CatalogEntry", "DenseMLP", "LayerSpec", "MLASpec", "ModelSpec", "MoEMLP",
    "from_config", "get_entry", "list_entries", "load_model", "supported_families",
]

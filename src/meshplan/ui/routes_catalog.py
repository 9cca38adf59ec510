"""Catalog endpoints (the pickers' choices) and the config.json upload."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from meshplan.errors import ConfigError
from meshplan.ui.schemas import NAME_MAX
from meshplan.ui.uploads import UPLOAD_PREFIX, read_limited
from meshplan.userfiles import parse_json

router = APIRouter(prefix="/api", tags=["catalog"])


class ModelEntry(BaseModel):
    """A catalog model."""

    name: str
    family: str
    description: str
    hf_repo: str | None


class GPUEntry(BaseModel):
    """A catalog GPU."""

    name: str
    vendor: str
    hbm_bytes: int


class UploadedConfig(BaseModel):
    """An uploaded config.json: the model name to use in requests, and what it describes."""

    model: str
    name: str
    parameters: int


@router.get("/models", response_model=list[ModelEntry])
def models() -> list[ModelEntry]:
    """Every catalog model (`meshplan models list`)."""
    from meshplan.model.catalog_index import list_entries

    return [ModelEntry(name=e.name, family=e.family, description=e.description, hf_repo=e.hf_repo)
            for e in list_entries()]


@router.get("/gpus", response_model=list[GPUEntry])
def gpus() -> list[GPUEntry]:
    """Every catalog GPU (`meshplan gpus list`)."""
    from meshplan.hardware import list_gpus

    return [GPUEntry(name=g.name, vendor=g.vendor, hbm_bytes=g.hbm_bytes) for g in list_gpus()]


@router.get("/engines", response_model=list[str])
def engines() -> list[str]:
    """Every serving engine meshplan models (the `engine` of a serving request)."""
    from meshplan.serving.engine.defaults import ENGINES

    return list(ENGINES)


@router.post("/configs", response_model=UploadedConfig)
async def upload_config(request: Request, filename: str = Query("config.json", max_length=NAME_MAX)) -> UploadedConfig:
    """Upload a Hugging Face config.json (the raw file as the request body); answers the
    `upload:ID` name to give as `model` in the other requests."""
    from meshplan.model import load_model
    from meshplan.model.counts import total_params

    text = (await read_limited(request, filename)).decode("utf-8", "replace")
    if not isinstance(parse_json(text, filename), dict):
        raise ConfigError(f"{filename}: expected a JSON object (a model's config.json)")
    upload_id, path = request.app.state.uploads.save(text.encode(), "config.json")
    try:
        spec = load_model(str(path))
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(str(path), filename)) from None
    return UploadedConfig(model=UPLOAD_PREFIX + upload_id, name=spec.name, parameters=total_params(spec))

"""The API's reference page at /docs, rendered on the server from the app's own OpenAPI schema
(every endpoint, its parameters and request body, and every request model's fields with their
types, defaults and descriptions). Nothing is loaded from a CDN: FastAPI's Swagger UI and ReDoc
pages fetch their scripts from one, so they are turned off and the page works offline."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)
METHOD_ORDER = ("get", "post", "delete")


def type_text(schema: dict[str, Any]) -> str:
    """A field's type as a person reads it: `integer >= 1`, `one of: a, b`, `list of string`,
    `TrainingPlan` (a model listed below), `... (or null)`."""
    if not isinstance(schema, dict):  # JSON Schema's `true`: anything
        return "any"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return "one of: " + ", ".join(str(v) for v in schema["enum"])
    if "anyOf" in schema:
        real = [s for s in schema["anyOf"] if s.get("type") != "null"]
        text = " or ".join(type_text(s) for s in real)
        return text + " (or null)" if len(real) < len(schema["anyOf"]) else text
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_text(schema["allOf"][0])
    kind = schema.get("type", "any")
    if kind == "array":
        return "list of " + type_text(schema.get("items", {}))
    if kind == "object" and "additionalProperties" in schema:
        return "object of " + type_text(schema["additionalProperties"])
    return kind + _bounds(schema)


def _bounds(schema: dict[str, Any]) -> str:
    marks = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"),
             ("maxLength", "length <="))
    return "".join(f" {sign} {schema[key]:g}" for key, sign in marks if key in schema)


def endpoints(api: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (path, method): summary, description, parameters and request body."""
    out = []
    for path, methods in api.get("paths", {}).items():
        for method in sorted(methods, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 9):
            op = methods[method]
            body = (op.get("requestBody") or {}).get("content", {})
            out.append({"method": method.upper(), "path": path, "summary": op.get("summary", ""),
                        "description": op.get("description", ""),
                        "parameters": [{"name": p["name"], "where": p["in"], "required": p.get("required", False),
                                        "type": type_text(p.get("schema", {}))} for p in op.get("parameters", [])],
                        "body": [f"{kind}: {type_text(s.get('schema', {}))}" for kind, s in body.items()]})
    return out


def models(api: dict[str, Any]) -> list[dict[str, Any]]:
    """Every schema of the API with its fields (name, form label, type, required, default, description)."""
    out = []
    for name, schema in sorted(api.get("components", {}).get("schemas", {}).items()):
        required = set(schema.get("required", ()))
        fields = [{"name": field, "type": type_text(s), "required": field in required,
                   "label": s.get("title", ""), "default": _default(s), "description": s.get("description", "")}
                  for field, s in schema.get("properties", {}).items()]
        out.append({"name": name, "description": schema.get("description", ""), "fields": fields})
    return out


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    """The API reference, from /openapi.json, as one static page."""
    from meshplan.ui.pages import PAGES, templates

    api = request.app.openapi()
    return templates().TemplateResponse(request, "apidocs.html", {
        "api": api, "endpoints": endpoints(api), "models": models(api), "page": None, "pages": PAGES})

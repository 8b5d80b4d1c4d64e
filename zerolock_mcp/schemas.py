"""Tool input schemas, taken from the API's own OpenAPI document.

A tool's arguments are its REST operation's path parameters and request body, so
its input schema is built from the document the REST API publishes (the same one
``GET /api/schema`` serves): the two cannot drift. OpenAPI 3.0 schemas are
nearly JSON Schema; what differs is turned here into draft 2020-12, the dialect
MCP gives tool schemas: ``nullable: true`` becomes a ``"null"`` alternative, and
``#/components/schemas/X`` references become ``#/$defs/X`` inside the tool's
schema (only the definitions it reaches)."""

from __future__ import annotations

import copy
import re
from typing import Any

COMPONENT = "#/components/schemas/"
DEFS = "#/$defs/"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Annotations OpenAPI adds that JSON Schema validators would take as unknown
# keywords or that mean nothing to a model.
OPENAPI_ONLY = ("nullable", "discriminator", "xml", "externalDocs", "example", "readOnly")


def json_schema(node: Any) -> Any:
    """One OpenAPI 3.0 schema node as JSON Schema 2020-12 (a new object)."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: json_schema(v) for k, v in node.items() if k not in OPENAPI_ONLY}
    if isinstance(out.get("$ref"), str) and out["$ref"].startswith(COMPONENT):
        out["$ref"] = DEFS + out["$ref"][len(COMPONENT) :]
    if "example" in node:
        out["examples"] = [node["example"]]
    if node.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str) and set(out) <= {"type", "description", "format", "default"}:
            out["type"] = [kind, "null"]
        elif "enum" in out and isinstance(out["enum"], list):
            out["enum"] = [*out["enum"], *([] if None in out["enum"] else [None])]
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
        else:
            # A null must pass whatever else the node says (a pattern, a $ref).
            description = out.pop("description", None)
            out = {"anyOf": [out, {"type": "null"}]}
            if description is not None:
                out["description"] = description
    return out


def _refs(node: Any) -> set[str]:
    """The component names a node refers to, in either spelling: a document's own
    (``#/components/schemas/X``) or a tool schema's, already turned (``#/$defs/X``)."""
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    ref = node.get("$ref")
    found: set[str] = set()
    if isinstance(ref, str) and _is_component(ref):
        found = {ref[len(COMPONENT) :]}
    elif isinstance(ref, str) and ref.startswith(DEFS):
        found = {ref[len(DEFS) :]}
    return found.union(*(_refs(v) for v in node.values())) if node else found


def _is_component(ref: Any) -> bool:
    return isinstance(ref, str) and ref.startswith(COMPONENT)


def reachable_defs(document: dict[str, Any], roots: list[Any]) -> dict[str, Any]:
    """The components the roots reach, directly or through each other."""
    components = document.get("components", {}).get("schemas", {})
    seen: dict[str, Any] = {}
    todo = sorted(set().union(*(_refs(root) for root in roots))) if roots else []
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen[name] = components[name]
        todo.extend(sorted(_refs(components[name]) - set(seen)))
    return {name: json_schema(seen[name]) for name in sorted(seen)}


def operation(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return document["paths"][path][method.lower()]


def path_parameters(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """The operation's path parameters, by name: their schemas as JSON Schema."""
    params = operation(document, method, path).get("parameters", [])
    return {p["name"]: json_schema(p["schema"]) for p in params if p.get("in") == "path"}


def body_schema(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """The operation's JSON request body schema, resolved one level (the body's own
    component inlined, so its properties sit beside the path parameters)."""
    body = operation(document, method, path).get("requestBody", {})
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    if _is_component(schema.get("$ref")):
        schema = document["components"]["schemas"][schema["$ref"][len(COMPONENT) :]]
    return copy.deepcopy(schema)


def tool_input_schema(
    document: dict[str, Any],
    method: str,
    path: str,
    *,
    extra: dict[str, Any] | None = None,
    required: list[str] | None = None,
    drop_body_rules: bool = False,
) -> dict[str, Any]:
    """A tool's input: the path parameters and the body's properties side by side,
    plus ``extra`` ones the tool adds (an Idempotency-Key, a wait). ``required``
    replaces the body's list when the REST rules are conditional (a commit needs
    ``new_value`` or ``append`` or ``delta``): the API still enforces them."""
    params = path_parameters(document, method, path)
    body = body_schema(document, method, path)
    properties = {name: schema for name, schema in params.items()}
    properties.update({k: json_schema(v) for k, v in body.get("properties", {}).items()})
    properties.update(extra or {})
    needed = list(params) + (list(body.get("required", [])) if required is None else required)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": sorted(set(needed), key=list(properties).index),
    }
    if "description" in body:
        schema["description"] = body["description"]
    additional = body.get("additionalProperties", True)
    # Unknown arguments are refused by the API (VALIDATION_ERROR) where its body
    # refuses unknown fields; where it ignores them, any value may come.
    schema["additionalProperties"] = json_schema(additional) if additional is not True else True
    if not drop_body_rules:
        for rule in ("allOf", "anyOf", "oneOf", "not"):
            if rule in body:
                schema[rule] = json_schema(body[rule])
    defs = reachable_defs(document, [schema])
    if defs:
        schema["$defs"] = defs
    return schema


def path_value_ok(schema: dict[str, Any], value: Any) -> bool:
    """A path argument must be what its parameter allows before it goes into a
    URL: a string matching the document's pattern (these patterns are the API's
    own, anchored and linear), so no argument can reach another route."""
    if not isinstance(value, str) or not value or "/" in value or "?" in value:
        return False
    pattern = schema.get("pattern")
    return pattern is None or re.fullmatch(pattern, value) is not None

"""The pure rules of zerolock_mcp: OpenAPI 3.0 schemas as JSON Schema 2020-12,
and which path arguments may go into a URL."""

from __future__ import annotations

import jsonschema
import pytest

from common.errors import ApiError
from zerolock_mcp.schemas import json_schema, path_value_ok, tool_input_schema
from zerolock_mcp.tools import BY_NAME

DOCUMENT = {
    "paths": {
        "/api/things/{thing_id}": {
            "post": {
                "parameters": [
                    {
                        "in": "path",
                        "name": "thing_id",
                        "schema": {"type": "string", "pattern": "^t_[0-9]{3}$"},
                    }
                ],
                "requestBody": {
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}
                    }
                },
            }
        }
    },
    "components": {
        "schemas": {
            "Thing": {
                "type": "object",
                "properties": {
                    "note": {"type": "string", "nullable": True},
                    "tree": {"$ref": "#/components/schemas/Node"},
                    "kind": {"enum": ["a", "b"], "nullable": True},
                },
                "required": ["note"],
                "additionalProperties": False,
            },
            "Node": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
            "Unused": {"type": "string"},
        }
    },
}


def test_nullable_becomes_a_null_alternative_and_refs_point_into_defs():
    assert json_schema({"type": "string", "nullable": True}) == {"type": ["string", "null"]}
    assert json_schema({"enum": ["a"], "nullable": True}) == {"enum": ["a", None]}
    assert json_schema({"$ref": "#/components/schemas/X", "nullable": True}) == {
        "anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]
    }
    patterned = json_schema({"type": "string", "pattern": "^a$", "nullable": True})
    assert patterned == {"anyOf": [{"type": "string", "pattern": "^a$"}, {"type": "null"}]}


def test_a_tool_schema_holds_path_and_body_and_only_the_definitions_it_reaches():
    schema = tool_input_schema(DOCUMENT, "POST", "/api/things/{thing_id}")
    assert list(schema["properties"]) == ["thing_id", "note", "tree", "kind"]
    assert schema["required"] == ["thing_id", "note"]
    assert sorted(schema["$defs"]) == ["Node"]
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"thing_id": "t_001", "note": None, "tree": [[], [[]]]})
    assert not validator.is_valid({"thing_id": "t_001", "note": None, "tree": ["leaf"]})
    assert not validator.is_valid({"thing_id": "t_001", "note": "x", "other": 1})


@pytest.mark.parametrize("value", ["t_001"])
def test_a_path_argument_matching_its_pattern_may_go_into_the_url(value):
    assert path_value_ok({"pattern": "^t_[0-9]{3}$"}, value)


@pytest.mark.parametrize("value", ["", "t_01", "t_001/../x", "t_001?x=1", 5, None, ["t_001"]])
def test_anything_else_never_reaches_a_url(value):
    assert not path_value_ok({"pattern": "^t_[0-9]{3}$"}, value)


def test_a_tool_call_maps_to_its_rest_request_and_headers():
    document = {
        "paths": {
            "/api/shards/{shard_id}/commit": {
                "post": {
                    "parameters": [
                        {
                            "in": "path",
                            "name": "shard_id",
                            "schema": {"type": "string", "pattern": "^[a-z.]+$"},
                        }
                    ],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"type": "object"}}}
                    },
                }
            }
        }
    }
    call = BY_NAME["shard_commit"].request(
        document,
        {"shard_id": "a.b", "expected_version": 1, "new_value": 2, "idempotency_key": "k-1"},
    )
    assert (call.method, call.path) == ("POST", "/api/shards/a.b/commit")
    assert call.body == {"expected_version": 1, "new_value": 2}
    assert call.headers == {"Idempotency-Key": "k-1"}
    with pytest.raises(ApiError) as refused:
        BY_NAME["shard_commit"].request(document, {"shard_id": "a.b", "idempotency_key": "x\ny"})
    assert refused.value.code == "VALIDATION_ERROR"
    with pytest.raises(ApiError):
        BY_NAME["shard_commit"].request(document, ["not", "an", "object"])

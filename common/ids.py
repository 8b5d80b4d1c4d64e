"""The id rules, one home: what a shard id and an agent id may be, the test of
each, and the request-body fields that apply them (and show their patterns in
the OpenAPI document). Every app reads ids from here: shards, coordination
(transactions), access (the agent check), realtime (subscriptions) and
approvals."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from common.inputs import JsonTyped

# 1-128 of [A-Za-z0-9_.:-], except "." and ".." (path segments: a URL with them
# names another resource). Three branches rather than a lookahead so OpenAPI
# tools that generate ids from the pattern can read it.
SHARD_ID_REGEX = (
    r"^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}"
    r"|\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,126}"
    r"|\.\.[A-Za-z0-9_.:-]{1,126})$"
)
SHARD_ID_HELP = '1-128 chars of [A-Za-z0-9_.:-], not "." or ".."'

# An agent id names who acts, never a path segment: "@" is allowed (``ops@team``),
# and "." and ".." are ids like any other.
AGENT_ID_REGEX = r"^[A-Za-z0-9_.:@-]{1,128}$"
AGENT_ID_HELP = "1-128 chars of [A-Za-z0-9_.:@-]"

_SHARD_ID = re.compile(SHARD_ID_REGEX)
_AGENT_ID = re.compile(AGENT_ID_REGEX)


def is_shard_id(text: object) -> bool:
    """The shard-id rule. A full match: ``$`` alone also matches before a final
    newline, which let "plan\\n" through."""
    return isinstance(text, str) and _SHARD_ID.fullmatch(text) is not None


def is_agent_id(text: object) -> bool:
    """The agent-id rule; a full match, as ``is_shard_id``."""
    return isinstance(text, str) and _AGENT_ID.fullmatch(text) is not None


class _IdField(JsonTyped, serializers.RegexField):
    """A JSON string matching an id rule. The pattern documents the rule
    (OpenAPI); the ``is_*`` function is the rule itself."""

    json_type = "string"
    kind: str
    regex_text: str
    help: str

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.regex_text, help_text=self.help, **kwargs)
        self.error_messages["invalid"] = f"{self.kind} ids are {self.help}."

    def rule(self, value: str) -> bool:
        raise NotImplementedError

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not self.rule(value):
            self.fail("invalid")
        return value


class ShardIdField(_IdField):
    kind, regex_text, help = "Shard", SHARD_ID_REGEX, SHARD_ID_HELP

    def rule(self, value: str) -> bool:
        return is_shard_id(value)


class AgentIdField(_IdField):
    kind, regex_text, help = "Agent", AGENT_ID_REGEX, AGENT_ID_HELP

    def rule(self, value: str) -> bool:
        return is_agent_id(value)

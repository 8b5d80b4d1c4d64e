"""etcd's native client path for bench/peer.py: gRPC to its KV service.

peer.py speaks to etcd through its JSON gateway (``POST /v3/kv/range`` ...), the
path a client without etcd's protobuf stubs takes. etcd's own clients speak gRPC
on the same port. ``GrpcClient`` gives peer.py's ``Etcd`` peer that path with
the interface its HTTP clients have (``request(method, path, body)`` answering
the gateway's JSON), so every workload, answer check and final count is the same
code for both of etcd's paths.

The messages are described here from etcd's published wire format (etcdserverpb
``KV``: Range, Put, Txn, and mvccpb ``KeyValue``), only the fields these
workloads send or read, with etcd's field numbers; protobuf skips any other field
it receives. Built at import with ``descriptor_pb2``, so nothing is generated or
compiled. grpcio and protobuf come with the project's test extras
(``pip install -e ".[bench]"`` installs them too); without them
``peer.py --etcd-grpc`` stops at once and says what to install.

Each agent's channel has its own TCP connection (a local subchannel pool: by
default grpcio shares one connection between channels to the same address), as
each HTTP agent has its own keep-alive connection. The client cost of turning
the gateway's JSON into messages and back (``json_format``) is the client's, and
shows in peer.py's client CPU column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

_F = descriptor_pb2.FieldDescriptorProto
INT64, UINT64, BOOL, BYTES, MESSAGE, ENUM = (
    _F.TYPE_INT64,
    _F.TYPE_UINT64,
    _F.TYPE_BOOL,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
    _F.TYPE_ENUM,
)
REPEATED = _F.LABEL_REPEATED
TIMEOUT_S = 120.0  # as peer.py's HTTP clients

# (name, number, type, type name for a message or enum, repeated, oneof index)
Field = tuple[str, int, int, str, bool, int | None]

_MESSAGES: dict[str, list[Field]] = {
    "mvccpb.KeyValue": [
        ("key", 1, BYTES, "", False, None),
        ("create_revision", 2, INT64, "", False, None),
        ("mod_revision", 3, INT64, "", False, None),
        ("version", 4, INT64, "", False, None),
        ("value", 5, BYTES, "", False, None),
        ("lease", 6, INT64, "", False, None),
    ],
    "etcdserverpb.ResponseHeader": [
        ("cluster_id", 1, UINT64, "", False, None),
        ("member_id", 2, UINT64, "", False, None),
        ("revision", 3, INT64, "", False, None),
        ("raft_term", 4, UINT64, "", False, None),
    ],
    "etcdserverpb.RangeRequest": [
        ("key", 1, BYTES, "", False, None),
        ("range_end", 2, BYTES, "", False, None),
        ("limit", 3, INT64, "", False, None),
        ("revision", 4, INT64, "", False, None),
        ("serializable", 7, BOOL, "", False, None),
        ("keys_only", 8, BOOL, "", False, None),
        ("count_only", 9, BOOL, "", False, None),
    ],
    "etcdserverpb.RangeResponse": [
        ("header", 1, MESSAGE, ".etcdserverpb.ResponseHeader", False, None),
        ("kvs", 2, MESSAGE, ".mvccpb.KeyValue", True, None),
        ("more", 3, BOOL, "", False, None),
        ("count", 4, INT64, "", False, None),
    ],
    "etcdserverpb.PutRequest": [
        ("key", 1, BYTES, "", False, None),
        ("value", 2, BYTES, "", False, None),
        ("lease", 3, INT64, "", False, None),
        ("prev_kv", 4, BOOL, "", False, None),
    ],
    "etcdserverpb.PutResponse": [
        ("header", 1, MESSAGE, ".etcdserverpb.ResponseHeader", False, None),
        ("prev_kv", 2, MESSAGE, ".mvccpb.KeyValue", False, None),
    ],
    "etcdserverpb.Compare": [
        ("result", 1, ENUM, ".etcdserverpb.Compare.CompareResult", False, None),
        ("target", 2, ENUM, ".etcdserverpb.Compare.CompareTarget", False, None),
        ("key", 3, BYTES, "", False, None),
        ("version", 4, INT64, "", False, 0),
        ("create_revision", 5, INT64, "", False, 0),
        ("mod_revision", 6, INT64, "", False, 0),
        ("value", 7, BYTES, "", False, 0),
        ("lease", 8, INT64, "", False, 0),
        ("range_end", 64, BYTES, "", False, None),
    ],
    "etcdserverpb.RequestOp": [
        ("request_range", 1, MESSAGE, ".etcdserverpb.RangeRequest", False, 0),
        ("request_put", 2, MESSAGE, ".etcdserverpb.PutRequest", False, 0),
    ],
    "etcdserverpb.ResponseOp": [
        ("response_range", 1, MESSAGE, ".etcdserverpb.RangeResponse", False, 0),
        ("response_put", 2, MESSAGE, ".etcdserverpb.PutResponse", False, 0),
    ],
    "etcdserverpb.TxnRequest": [
        ("compare", 1, MESSAGE, ".etcdserverpb.Compare", True, None),
        ("success", 2, MESSAGE, ".etcdserverpb.RequestOp", True, None),
        ("failure", 3, MESSAGE, ".etcdserverpb.RequestOp", True, None),
    ],
    "etcdserverpb.TxnResponse": [
        ("header", 1, MESSAGE, ".etcdserverpb.ResponseHeader", False, None),
        ("succeeded", 2, BOOL, "", False, None),
        ("responses", 3, MESSAGE, ".etcdserverpb.ResponseOp", True, None),
    ],
}
_ONEOFS = {
    "etcdserverpb.Compare": "target_union",
    "etcdserverpb.RequestOp": "request",
    "etcdserverpb.ResponseOp": "response",
}
_ENUMS = {
    "etcdserverpb.Compare": {
        "CompareResult": ["EQUAL", "GREATER", "LESS", "NOT_EQUAL"],
        "CompareTarget": ["VERSION", "CREATE", "MOD", "VALUE", "LEASE"],
    }
}


def _file(package: str) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"zerolock_bench_{package}.proto", package=package, syntax="proto3"
    )
    if package == "etcdserverpb":
        proto.dependency.append("zerolock_bench_mvccpb.proto")
    for full, fields in _MESSAGES.items():
        if not full.startswith(package + "."):
            continue
        message = proto.message_type.add(name=full.split(".", 1)[1])
        if full in _ONEOFS:
            message.oneof_decl.add(name=_ONEOFS[full])
        for enum_name, values in _ENUMS.get(full, {}).items():
            enum = message.enum_type.add(name=enum_name)
            for number, value in enumerate(values):
                enum.value.add(name=value, number=number)
        for name, number, kind, type_name, repeated, oneof in fields:
            field = message.field.add(
                name=name,
                number=number,
                type=kind,
                label=REPEATED if repeated else _F.LABEL_OPTIONAL,
            )
            if type_name:
                field.type_name = type_name
            if oneof is not None:
                field.oneof_index = oneof
    return proto


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file("mvccpb"))
_pool.Add(_file("etcdserverpb"))


def message(name: str) -> Any:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"etcdserverpb.{name}"))


# The gateway's path -> the gRPC method, its request and its response.
ROUTES = {
    "/v3/kv/range": ("Range", message("RangeRequest"), message("RangeResponse")),
    "/v3/kv/put": ("Put", message("PutRequest"), message("PutResponse")),
    "/v3/kv/txn": ("Txn", message("TxnRequest"), message("TxnResponse")),
}


@dataclass
class GrpcAnswer:
    """What peer.py reads of an etcd answer, its JSON already parsed."""

    method: str
    path: str
    status_code: int
    parsed: Any

    def json(self) -> Any:
        return self.parsed

    @property
    def text(self) -> str:  # only an error's is read
        return json.dumps(self.parsed)


class GrpcClient:
    """One agent's gRPC channel to etcd (its own connection), answering peer.py's
    calls in the gateway's JSON shape (``json_format``: int64 as strings, bytes as
    base64, enums by name, proto field names, a false or zero left out), so the
    ``Etcd`` peer's code reads both paths alike. An RPC error is answered as a
    5xx, which peer.py counts as an error."""

    kind = "grpc"

    def __init__(self, base_url: str) -> None:
        target = base_url.removeprefix("http://")
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self._calls = {
            path: self._channel.unary_unary(
                f"/etcdserverpb.KV/{rpc}",
                request_serializer=request_class.SerializeToString,
                response_deserializer=response_class.FromString,
            )
            for path, (rpc, request_class, response_class) in ROUTES.items()
        }

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> GrpcAnswer:
        _rpc, request_class, _response = ROUTES[path]
        sent = json_format.ParseDict(body or {}, request_class())
        try:
            reply = self._calls[path](sent, timeout=TIMEOUT_S)
        except grpc.RpcError as error:
            text = f"{error.code()}: {error.details()}"  # type: ignore[attr-defined]
            return GrpcAnswer(method, path, 503, {"error": text})
        parsed = json_format.MessageToDict(reply, preserving_proto_field_name=True)
        return GrpcAnswer(method, path, 200, parsed)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

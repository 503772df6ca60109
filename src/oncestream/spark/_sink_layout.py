"""Which input columns the ``jetstream`` sink uses, checked on the driver."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from .._errors import ConfigError
from ._sink_options import SinkOptions

__all__ = ["Layout", "layout_of"]


@dataclass(frozen=True)
class Layout:
    """Which input columns the sink uses, checked on the driver."""

    subject: bool
    data_binary: bool
    headers: str | None  # "array" | "string" | None
    msg_id: bool
    lineage: bool


def layout_of(schema: StructType, options: SinkOptions) -> Layout:
    types = {f.name: f.dataType for f in schema.fields}
    problems = []
    if "data" not in types:
        problems.append("missing column 'data' (binary or string)")
    elif not isinstance(types["data"], BinaryType | StringType):
        problems.append(
            f"column 'data' must be binary or string, got {types['data'].simpleString()}"
        )
    if "subject" in types and not isinstance(types["subject"], StringType):
        problems.append(f"column 'subject' must be string, got {types['subject'].simpleString()}")
    if "subject" not in types and options.subject is None:
        problems.append("missing column 'subject' (or give option 'subject')")
    if "msg_id" in types and not isinstance(types["msg_id"], StringType):
        problems.append(f"column 'msg_id' must be string, got {types['msg_id'].simpleString()}")
    headers = None
    if "headers" in types:
        kind = types["headers"]
        if isinstance(kind, MapType) and isinstance(kind.keyType, StringType):
            if isinstance(kind.valueType, StringType):
                headers = "string"
            elif isinstance(kind.valueType, ArrayType) and isinstance(
                kind.valueType.elementType, StringType
            ):
                headers = "array"
        if headers is None:
            problems.append(
                "column 'headers' must be map<string,array<string>> or map<string,string>, "
                f"got {kind.simpleString()}"
            )
    if problems:
        raise ConfigError(
            "the jetstream sink cannot write this DataFrame: "
            + "; ".join(problems)
            + f" (schema: {schema.simpleString()})"
        )
    lineage = isinstance(types.get("stream"), StringType) and isinstance(
        types.get("sequence"), LongType | IntegerType
    )
    return Layout(
        subject="subject" in types,
        data_binary=isinstance(types["data"], BinaryType),
        headers=headers,
        msg_id="msg_id" in types,
        lineage=lineage and "msg_id" not in types,
    )

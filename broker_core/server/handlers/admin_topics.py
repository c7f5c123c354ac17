"""Admin verbs on topics: ``CreateTopic``, ``ListTopics``, ``TopicStatus``, ``DeleteTopic``.

Request fields and results are listed in ``server/admin.py``; the rules of a change
(what ``update`` and ``force`` allow) are the broker's (``broker/topic_admin.py``).
"""

from __future__ import annotations

from typing import Final

from broker_core.broker.system_topics import is_system_topic
from broker_core.broker.topics import TopicConfig
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Json, Verb


def create_topic(ctx: ServerContext, args: Args) -> Json:
    """Create a topic; changing an existing one needs ``update`` (and ``force`` to hide
    messages by lowering the read queue count). See ``broker/topic_admin.py``."""
    name = args.text("name", required=True)
    queues = args.integer("queues", minimum=1)
    old = ctx.broker.topics.get(name)
    base = (
        old.to_dict()
        if old
        else {
            "read_queue_nums": ctx.broker.topics.default_queue_nums,
            "write_queue_nums": ctx.broker.topics.default_queue_nums,
        }
    )
    values: Json = {**base, "name": name}
    if queues is not None:
        values["read_queue_nums"] = values["write_queue_nums"] = queues
    for field, key in (
        ("read_queues", "read_queue_nums"),
        ("write_queues", "write_queue_nums"),
        ("perm", "perm"),
    ):
        if args.has(field):
            values[key] = args.integer(field)
    message_type = args.text("message_type")
    if message_type is not None:
        values["message_type"] = message_type.upper()
    if args.has("attributes"):
        values["attributes"] = args.obj("attributes")
    change = ctx.broker.administer_topic(
        TopicConfig.from_dict(values),
        update=bool(args.flag("update")),
        force=bool(args.flag("force")),
    )
    return {
        **change.config.to_dict(),
        "created": change.created,
        "changed": change.changed,
        "hidden_messages": change.hidden_messages,
        "warnings": change.warnings,
    }


def list_topics(ctx: ServerContext, args: Args) -> list[Json]:
    include_system = bool(args.flag("include_system"))
    return [
        c.to_dict()
        for c in ctx.broker.topics.list()
        if include_system or not is_system_topic(c.name)
    ]


def topic_status(ctx: ServerContext, args: Args) -> list[Json]:
    name = args.text("name", required=True)
    return [
        {"queue_id": q, "min_offset": low, "max_offset": high}
        for q, low, high in ctx.broker.topic_status(name)
    ]


def delete_topic(ctx: ServerContext, args: Args) -> Json:
    """Forget a topic: its config, queues and committed offsets (``Broker.delete_topic``)."""
    name = args.text("name", required=True)
    ctx.broker.delete_topic(name)
    return {"deleted": name}


_CREATE_FIELDS: Final = frozenset(
    {
        "name",
        "queues",
        "read_queues",
        "write_queues",
        "perm",
        "message_type",
        "attributes",
        "update",
        "force",
    }
)

VERBS: Final = {
    "CreateTopic": Verb(create_topic, _CREATE_FIELDS, change=True),
    "ListTopics": Verb(list_topics, frozenset({"include_system"})),
    "TopicStatus": Verb(topic_status, frozenset({"name"})),
    "DeleteTopic": Verb(delete_topic, frozenset({"name"}), change=True),
}

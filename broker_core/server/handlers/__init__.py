"""The RPC handlers of every service the broker serves, one module per RPC family.

A family is the RPCs that act on the same thing; its module reads top to bottom like
that part of the protocol. The services' wiring (``service.py`` for MessagingService,
``bulk.py`` for the Bulk service, ``admin.py`` for the Admin service) maps method names
to the functions here. Helpers that more than one family needs live in ``common.py``; a
handler module never imports a sibling handler module.

====================  ===========================================================  =========
module                RPCs                                                         service
====================  ===========================================================  =========
``route``             QueryRoute, QueryAssignment                                  Messaging
``send``              SendMessage; SendBulk                                        Messaging; Bulk
``held``              EndTransaction, RecallMessage (half and timed messages)      Messaging
``receive``           ReceiveMessage (POP)                                         Messaging
``delivery``          AckMessage, ChangeInvisibleDuration,                         Messaging
                      ForwardMessageToDeadLetterQueue (by receipt handle)
``pull``              PullMessage; PullRaw (offset pulls)                          Messaging; Bulk
``offsets``           UpdateOffset, GetOffset, QueryOffset                         Messaging
``clients``           Heartbeat, NotifyClientTermination, SyncLiteSubscription     Messaging
``telemetry``         Telemetry (the session stream)                               Messaging
``admin_topics``      CreateTopic, ListTopics, TopicStatus, DeleteTopic            Admin
``admin_groups``      CreateGroup, ListGroups, GroupProgress, ResetOffset,         Admin
                      DeleteGroup
``admin_inspect``     Health, QueryMessage                                         Admin
``admin_locks``       LockQueues, UnlockQueues                                     Admin
``admin_config``      GetBrokerConfig, UpdateBrokerConfig                          Admin
``admin_auth``        CreateUser, DeleteUser, ListUsers, CreateAcl, DeleteAcl,     Admin
                      ListAcls
====================  ===========================================================  =========

MessagingService handlers take ``(ctx, request, context)`` with the generated request
class and return the response (an iterator of responses for streaming RPCs); errors are
raised and turned into statuses by ``service.py``. Bulk handlers take and return bytes
and never raise. Admin verbs take ``(ctx, Args)`` and return JSON; ``admin.py`` turns
their errors into statuses.
"""

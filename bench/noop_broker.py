"""A MessagingService that stores nothing: the ceiling of any broker behind grpcio.

``produce`` runs it beside our broker. Its SendMessage does the least a broker must do
to answer — gRPC parses the request, one OK entry per message carries the message's id
back — so the rate our client reaches against it is the most any Python broker on
grpcio could reach with the same client; the gap between it and our broker is the
broker's own work (checking, storing, dispatching, indexing).

Run as ``python -m bench.noop_broker``: prints the port, then serves until killed.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client.transport import MAX_MESSAGE_BYTES


class NoopService(service_pb2_grpc.MessagingServiceServicer):
    def SendMessage(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = pb.Status(code=pb.Code.OK, message="OK")
        response = service_pb2.SendMessageResponse(status=status)
        add = response.entries.add
        for offset, message in enumerate(request.messages):
            add(status=status, message_id=message.system_properties.message_id, offset=offset)
        return response


def main() -> None:
    server = grpc.server(
        futures.ThreadPoolExecutor(8),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    service_pb2_grpc.add_MessagingServiceServicer_to_server(NoopService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
